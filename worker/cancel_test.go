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
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// cancelRun runs one long job, cancels it while it runs, and checks the
// handler saw broker.ErrCancelled as its context's cause and the job ended
// in the dead letters as cancelled, with one attempt.
func cancelRun(t *testing.T, tb *testBundle, cfg func() context.CancelFunc) {
	t.Helper()
	typ := job.New[payload]("report.build", job.MaxRetries(5))
	started := make(chan struct{}, 1)
	var cause atomic.Value
	var runs atomic.Int64
	typ.Handle(tb.reg, func(ctx context.Context, _ *job.Job[payload]) error {
		runs.Add(1)
		started <- struct{}{}
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return ctx.Err()
	})
	defer cfg()()
	e, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not start")
	}
	res, err := tb.b.Cancel(tb.ctx, "default", e.ID)
	if err != nil || !res.Running {
		t.Fatalf("Cancel: %+v, %v; want running", res, err)
	}
	var rec *job.DeadRecord
	redistest.WaitFor(t, 20*time.Second, "cancelled dead record", func() bool {
		rec, err = deadletter.New(tb.b).Get(tb.ctx, "default", e.ID)
		return err == nil
	})
	if c, _ := cause.Load().(error); !errors.Is(c, broker.ErrCancelled) {
		t.Fatalf("handler's cause %v, want broker.ErrCancelled", c)
	}
	if rec.Reason != broker.ReasonCancelled || rec.Attempts != 1 || !strings.Contains(rec.Error, "cancelled") || runs.Load() != 1 {
		t.Fatalf("dead record %+v after %d runs", rec, runs.Load())
	}
	if _, err := tb.b.Cancel(tb.ctx, "default", e.ID); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("cancel of an ended job: %v", err)
	}
	if n, _ := tb.rdb.HLen(tb.ctx, tb.Keys("default").Cancels).Result(); n != 0 {
		t.Fatalf("%d cancel marks left", n)
	}
}

// The pub/sub notice stops the handler at once (the heartbeat is far off).
func TestCancelRunningByNotice(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	cfg := tb.config(t)
	cfg.Lease = time.Minute // heartbeat every 20 s: not what stops it
	cancelRun(t, tb, func() context.CancelFunc { return start(t, cfg) })
}

// noCancels drops the cancel notices: only the heartbeat can tell.
type noCancels struct{ protocol.Broker }

func (noCancels) Cancels(context.Context, []string) (<-chan protocol.CancelNotice, func()) {
	ch := make(chan protocol.CancelNotice)
	return ch, func() { close(ch) }
}

// With the notice missed, the heartbeat finds the request.
func TestCancelRunningByHeartbeat(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { return noCancels{p} })
	cfg.Lease, cfg.HeartbeatInterval = 3*time.Second, 200*time.Millisecond
	cancelRun(t, tb, func() context.CancelFunc { return start(t, cfg) })
}

// A job asked to stop whose worker died is ended as cancelled by the
// reaper, not retried.
func TestCancelRunningWorkerGone(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	e, err := job.New[payload]("report.build", job.MaxRetries(5)).Enqueue(tb.ctx, tb.b, payload{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A "worker" that claims with a short lease and dies.
	shards := []keyspace.Shard{}
	p := protocol.For(tb.b)
	if shards, err = p.Shards(tb.ctx, "default"); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Claim(tb.ctx, shards[0], protocol.Caller{ID: "dead", Lease: time.Second}, "1", 1, 300*time.Millisecond); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claim: %v %v", res, err)
	}
	if res, err := tb.b.Cancel(tb.ctx, "default", e.ID); err != nil || !res.Running {
		t.Fatalf("Cancel: %+v, %v", res, err)
	}
	var ran atomic.Bool
	job.New[payload]("report.build").Handle(tb.reg, func(context.Context, *job.Job[payload]) error { ran.Store(true); return nil })
	cfg := tb.config(t)
	cfg.ReapInterval = 100 * time.Millisecond
	start(t, cfg)
	var rec *job.DeadRecord
	redistest.WaitFor(t, 20*time.Second, "reaped as cancelled", func() bool {
		rec, err = deadletter.New(tb.b).Get(tb.ctx, "default", e.ID)
		return err == nil
	})
	if rec.Reason != broker.ReasonCancelled || ran.Load() {
		t.Fatalf("dead record %+v, ran again %v", rec, ran.Load())
	}
}
