package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// TestKeyRateWorkerSleepsUntilToken: under a strict per-key limit of 2 per
// 400 ms (+100 ms slack), a worker whose MaxIdle is an hour runs a key's
// 6 jobs 2 at a time, each pair a window after the last, waking for each
// token by the claim's next (nothing else could wake it); another key's
// jobs and unkeyed jobs run at once beside them, each job on its first
// attempt.
func TestKeyRateWorkerSleepsUntilToken(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("sms.code")
	var mu sync.Mutex
	starts := map[string][]time.Time{}
	attempts := 0
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		defer mu.Unlock()
		starts[j.Key] = append(starts[j.Key], time.Now())
		attempts += j.Attempt
		return nil
	})
	lim := job.RateLimit{Count: 2, Per: 400 * time.Millisecond, Strict: true, Slack: 100 * time.Millisecond}
	if err := tb.b.SetKeyRateLimit(tb.ctx, "default", "", lim); err != nil {
		t.Fatal(err)
	}
	var items []job.Item[payload]
	for i := range 6 {
		items = append(items, job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.Key("alice")}})
	}
	for i := range 2 {
		items = append(items, job.Item[payload]{Args: payload{N: 10 + i}, Opts: []job.Option{job.Key("bob")}})
	}
	for i := range 3 {
		items = append(items, job.Item[payload]{Args: payload{N: 20 + i}})
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.MaxIdle = time.Hour
	start(t, cfg)
	t0 := time.Now()
	redistest.WaitFor(t, 10*time.Second, "every job done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts["alice"]) == 6 && len(starts["bob"]) == 2 && len(starts[""]) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if attempts != 11 {
		t.Errorf("attempts add up to %d for 11 jobs: a held job spent one", attempts)
	}
	a := starts["alice"]
	for i := 2; i < len(a); i++ {
		// Claims 2 apart are Per + Slack apart on the server's clock; their
		// starts may drift by less than the slack.
		if d := a[i].Sub(a[i-2]); d < lim.Per {
			t.Errorf("alice's starts %d and %d are %v apart, under the %v window", i-2, i, d, lim.Per)
		}
	}
	// Three pairs: the last a little over two windows after the first.
	if d := a[5].Sub(a[0]); d > 3*time.Second {
		t.Errorf("alice's 6 jobs took %v: the worker did not wake for the tokens", d)
	}
	for _, k := range []string{"bob", ""} {
		for _, s := range starts[k] {
			if d := s.Sub(t0); d > 2*time.Second {
				t.Errorf("a job of key %q started %v after the worker, held behind alice's", k, d)
			}
		}
	}
}
