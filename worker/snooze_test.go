package worker_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// A snoozing handler gets its job again after the delay without spending
// an attempt: a job with no retries left snoozes twice and then succeeds.
func TestSnoozeGivesTheAttemptBack(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("sms.send", job.MaxRetries(0))
	var mu sync.Mutex
	var seen []int
	var done atomic.Bool
	typ.Handle(tb.reg, func(_ context.Context, j *job.Job[payload]) error {
		mu.Lock()
		seen = append(seen, j.Attempt)
		n := len(seen)
		mu.Unlock()
		if n <= 2 {
			return retry.Snooze(100 * time.Millisecond) // the provider said 429, Retry-After
		}
		done.Store(true)
		return nil
	})
	start(t, tb.config(t))
	e, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "success after two snoozes", done.Load)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != 1 || seen[1] != 1 || seen[2] != 1 {
		t.Fatalf("attempts %v, want [1 1 1]: a snooze spends none", seen)
	}
	if _, err := deadletter.New(tb.b).Get(tb.ctx, "default", e.ID); err == nil {
		t.Fatal("a snoozed job was dead-lettered")
	}
}

// A job cannot snooze forever: the snooze after retrydecide.MaxSnoozes (100) is a
// failed attempt (here the last one: it dies, saying why).
func TestSnoozeCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("always.later", job.MaxRetries(0))
	var calls atomic.Int64
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error {
		calls.Add(1)
		return retry.Snooze(0)
	})
	start(t, tb.config(t))
	e, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	var rec *job.DeadRecord
	redistest.WaitFor(t, 60*time.Second, "dead after the cap", func() bool {
		rec, err = deadletter.New(tb.b).Get(tb.ctx, "default", e.ID)
		return err == nil
	})
	if n := calls.Load(); n != retrydecide.MaxSnoozes+1 {
		t.Fatalf("%d handlings, want %d", n, retrydecide.MaxSnoozes+1)
	}
	if !strings.Contains(rec.Error, "snoozed 100 times") || rec.Attempts != 1 {
		t.Fatalf("dead record %+v", rec)
	}
}
