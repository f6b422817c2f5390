package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// A worker remembers a job.Unique job when it ends: after success always,
// after a dead ending with UniqueIncludeDead; the id is free again after
// the window.
func TestUniqueRememberedByWorker(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ok := job.New[payload]("unique.ok", job.Unique(2*time.Second))
	bad := job.New[payload]("unique.bad", job.Unique(time.Hour), job.UniqueIncludeDead(), job.MaxRetries(0))
	var handled atomic.Int64
	ok.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { handled.Add(1); return nil })
	bad.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return errors.New("boom") })
	start(t, tb.config(t))

	first, err := ok.Enqueue(tb.ctx, tb.b, payload{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Refused while pending or within the window; the first refusal after
	// the job ran names it as ended.
	var dup *broker.DuplicateError
	redistest.WaitFor(t, 10*time.Second, "refused as ended", func() bool {
		_, err := ok.Enqueue(tb.ctx, tb.b, payload{N: 1})
		if err == nil {
			t.Fatal("a second job was stored while the first was pending or remembered")
		}
		if !errors.As(err, &dup) || dup.ID != first.ID {
			t.Fatalf("err %v, want a DuplicateError naming %q", err, first.ID)
		}
		return dup.Ended
	})
	// After the window the same arguments are a new job.
	redistest.WaitFor(t, 10*time.Second, "accepted after the window", func() bool {
		_, err := ok.Enqueue(tb.ctx, tb.b, payload{N: 1})
		if err != nil && !errors.Is(err, broker.ErrDuplicate) {
			t.Fatal(err)
		}
		return err == nil
	})
	redistest.WaitFor(t, 10*time.Second, "second run", func() bool { return handled.Load() == 2 })

	d, err := bad.Enqueue(tb.ctx, tb.b, payload{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "dead record", func() bool {
		_, err := deadletter.New(tb.b).Get(tb.ctx, "default", d.ID)
		return err == nil
	})
	_, err = bad.Enqueue(tb.ctx, tb.b, payload{N: 2})
	if !errors.As(err, &dup) || dup.ID != d.ID || !dup.Ended {
		t.Fatalf("after a dead ending: %v, want a DuplicateError naming %q as ended", err, d.ID)
	}
}

// A job that fails once and whose retry comes after its expiry never runs
// again: it ends in the dead letters as expired, with its last error.
func TestExpiryBetweenRetries(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("otp.send")
	var attempts atomic.Int64
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error {
		attempts.Add(1)
		return retry.After(1500*time.Millisecond, errors.New("gateway busy"))
	})
	start(t, tb.config(t))
	e, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1}, job.ExpireIn(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var rec *job.DeadRecord
	redistest.WaitFor(t, 15*time.Second, "expired dead record", func() bool {
		rec, err = deadletter.New(tb.b).Get(tb.ctx, "default", e.ID)
		return err == nil
	})
	if rec.Reason != "expired" || rec.Attempts != 1 || !strings.Contains(rec.Error, "gateway busy") || attempts.Load() != 1 {
		t.Fatalf("dead record %+v after %d attempts", rec, attempts.Load())
	}
}

// A job that expires before its first attempt is dropped and counted with
// DropExpired, and no handler sees it.
func TestExpiryBeforeFirstAttemptDropped(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("otp.late")
	var ran atomic.Bool
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { ran.Store(true); return nil })
	// Ready at once but expired by the time any worker starts.
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1}, job.ExpireAt(time.Now().Add(50*time.Millisecond)), job.DropExpired()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the expiry: a lower bound, not a timed assertion
	start(t, tb.config(t))
	redistest.WaitFor(t, 10*time.Second, "dropped and counted", func() bool {
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
		return err == nil && st.ExpiredDropped == 1 && st.Scheduled == 0
	})
	if ran.Load() {
		t.Fatal("an expired job ran")
	}
	if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "default")); st.Dead != 0 {
		t.Fatalf("stats %+v: a dropped job is not dead-lettered", st)
	}
}
