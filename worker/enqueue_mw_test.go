package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// enqueueLog is producer middleware that records, per envelope, the id
// and the error the enqueue under it reported for it.
type enqueueLog struct {
	mu     sync.Mutex
	stored map[string]int
	failed map[string][]error
}

func (l *enqueueLog) mw(next job.Enqueuer) job.Enqueuer {
	return job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
		err := next.Enqueue(ctx, envs...)
		var be *job.BatchError
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, e := range envs {
			ei := err
			if errors.As(err, &be) && len(be.Errs) == len(envs) {
				ei = be.Errs[i]
			}
			if ei == nil {
				l.stored[e.ID]++
			} else {
				l.failed[e.ID] = append(l.failed[e.ID], ei)
			}
		}
		return err
	})
}

// TestNextJobsStoredWithTheAckAreReportedOnceRecorded: Options.Enqueue's
// middleware learns that a next job stored with its parent's ack was
// stored only once the ack is recorded. A parent whose worker hung past
// its lease runs again on another worker, which acks it with the next
// job; the first worker's ack is then refused (lease lost), and its
// middleware is told the next job was not stored: one stored, one refused
// with ErrLeaseLost, and the next job runs once.
func TestNextJobsStoredWithTheAckAreReportedOnceRecorded(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	parent := job.New[payload]("mw.parent")
	child := job.New[payload]("mw.child")
	var calls, children atomic.Int32
	release := make(chan struct{})
	parent.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if calls.Add(1) == 1 {
			<-release // the first worker hangs past its lease
		}
		env, err := child.Envelope(payload{})
		if err != nil {
			return err
		}
		return job.Next(ctx, env)
	})
	child.Handle(tb.reg, func(context.Context, *job.Job[payload]) error {
		children.Add(1)
		return nil
	})
	log := &enqueueLog{stored: map[string]int{}, failed: map[string][]error{}}

	slow := tb.config(t)
	slow.Concurrency = 1
	slow.Lease = 300 * time.Millisecond
	slow.HeartbeatInterval = -1
	slow.ReapInterval = -1
	slow.Enqueue = []job.EnqueueMiddleware{log.mw}
	stopSlow := start(t, slow)
	if _, err := parent.Enqueue(tb.ctx, tb.b, payload{}, job.ID("p1")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "first delivery", func() bool { return calls.Load() == 1 })

	other := tb.config(t)
	other.Lease = 300 * time.Millisecond
	other.ReapInterval = 50 * time.Millisecond
	other.Enqueue = []job.EnqueueMiddleware{log.mw}
	start(t, other)
	redistest.WaitFor(t, 5*time.Second, "the next job run by the other worker", func() bool { return children.Load() == 1 })

	close(release) // the first worker's attempt succeeds; its ack is refused
	stopSlow()
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.stored) != 1 || len(log.failed) != 1 {
		t.Fatalf("stored %v, refused %v: want one next job stored, and the same refused once", log.stored, log.failed)
	}
	for id, n := range log.stored {
		errs := log.failed[id]
		if n != 1 || len(errs) != 1 || !errors.Is(errs[0], broker.ErrLeaseLost) {
			t.Fatalf("next job %s: stored %d times, refused with %v; want once, and ErrLeaseLost once", id, n, errs)
		}
	}
	if children.Load() != 1 {
		t.Fatalf("next job ran %d times, want 1", children.Load())
	}
}

// TestEnqueueMiddlewareRefusalFailsTheAttempt: middleware of
// Options.Enqueue that refuses a job's next jobs (returns an error without
// passing them on) fails the attempt, which is retried as any failure:
// nothing is acked without its next jobs, and the next job runs once,
// after the retry succeeded.
func TestEnqueueMiddlewareRefusalFailsTheAttempt(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	parent := job.New[payload]("mw.refused", fastRetry)
	child := job.New[payload]("mw.refusedchild")
	var attempts, children atomic.Int32
	parent.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		attempts.Add(1)
		env, err := child.Envelope(payload{})
		if err != nil {
			return err
		}
		return job.Next(ctx, env)
	})
	child.Handle(tb.reg, func(context.Context, *job.Job[payload]) error {
		children.Add(1)
		return nil
	})
	var refusals atomic.Int32
	refuseOnce := func(next job.Enqueuer) job.Enqueuer {
		return job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
			if refusals.Add(1) == 1 {
				return errors.New("not now")
			}
			return next.Enqueue(ctx, envs...)
		})
	}
	cfg := tb.config(t)
	cfg.Enqueue = []job.EnqueueMiddleware{refuseOnce}
	start(t, cfg)
	if _, err := parent.Enqueue(tb.ctx, tb.b, payload{}); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "the next job run", func() bool { return children.Load() == 1 })
	redistest.WaitFor(t, 5*time.Second, "the queue emptied", func() bool {
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
		return err == nil && st.Scheduled == 0 && st.Processing == 0
	})
	tb.queueKeysEmpty(t, "default")
	if attempts.Load() != 2 || children.Load() != 1 {
		t.Fatalf("%d attempts, next job ran %d times: want 2 and 1", attempts.Load(), children.Load())
	}
}
