package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// claimCounter counts claim calls.
type claimCounter struct {
	protocol.Broker
	calls atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, s keyspace.Shard, w protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	c.calls.Add(1)
	return c.Broker.Claim(ctx, s, w, id, n, lease)
}

// Under a rate limit every job runs on its first attempt, and the worker
// sleeps until the next token instead of spinning.
func TestRateLimitedWorkerSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("sms.send")
	var done, retried atomic.Int64
	typ.Handle(tb.reg, func(_ context.Context, j *job.Job[payload]) error {
		if j.Attempt != 1 {
			retried.Add(1)
		}
		done.Add(1)
		return nil
	})
	if err := tb.b.SetRateLimit(tb.ctx, "default", "sms.send", job.RateLimit{Count: 20, Per: time.Second, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	items := make([]job.Item[payload], 30)
	for i := range items {
		items[i] = job.Item[payload]{Args: payload{N: i}}
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
	cc := &claimCounter{}
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { cc.Broker = p; return cc })
	start(t, cfg)
	redistest.WaitFor(t, 30*time.Second, "all jobs", func() bool { return done.Load() == 30 })
	if retried.Load() != 0 {
		t.Fatalf("%d jobs ran on a later attempt", retried.Load())
	}
	// 30 jobs at 20/s take about a second; a spinning worker would claim
	// thousands of times.
	if n := cc.calls.Load(); n > 200 {
		t.Fatalf("%d claims for 30 jobs: the worker did not sleep until the next token", n)
	}
}

// Under a concurrency cap shared by two workers of 4 slots each, no more
// than the cap run at once, the cap is reached, and every job runs on its
// first attempt (a held job spends none).
func TestConcurrencyCapAcrossWorkers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, typ string }{{"queue", ""}, {"type", "report.build"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			typ := job.New[payload]("report.build")
			var running, most, done, retried atomic.Int64
			typ.Handle(tb.reg, func(_ context.Context, j *job.Job[payload]) error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				running.Add(-1)
				if j.Attempt != 1 {
					retried.Add(1)
				}
				done.Add(1)
				return nil
			})
			if err := tb.b.SetConcurrency(tb.ctx, "default", c.typ, 3); err != nil {
				t.Fatal(err)
			}
			items := make([]job.Item[payload], 60)
			for i := range items {
				items[i] = job.Item[payload]{Args: payload{N: i}}
			}
			if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				cfg := tb.config(t)
				cfg.Concurrency = 4
				start(t, cfg)
			}
			redistest.WaitFor(t, 30*time.Second, "all jobs", func() bool { return done.Load() == 60 })
			if m := most.Load(); m != 3 {
				t.Fatalf("at most %d ran at once, want the cap of 3", m)
			}
			if retried.Load() != 0 {
				t.Fatalf("%d jobs ran on a later attempt", retried.Load())
			}
		})
	}
}
