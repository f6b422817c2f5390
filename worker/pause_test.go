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

// pauseSeer counts the claims that found their queue paused.
type pauseSeer struct {
	protocol.Broker
	paused atomic.Int64
}

func (p *pauseSeer) Claim(ctx context.Context, s keyspace.Shard, c protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	res, err := p.Broker.Claim(ctx, s, c, id, n, lease)
	if res.Paused {
		p.paused.Add(1)
	}
	return res, err
}

// A worker claims nothing from a paused queue and sleeps; the resume's
// notice wakes it (long before its MaxIdle of a minute).
func TestPausedQueueSleepsUntilResume(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("report.build", job.Queue("reports"))
	var ran atomic.Int64
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { ran.Add(1); return nil })
	if err := tb.b.Pause(tb.ctx, "reports", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1}); err != nil {
		t.Fatal(err)
	}
	seer := &pauseSeer{}
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { seer.Broker = p; return seer })
	cfg.MaxIdle = time.Minute
	start(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "a claim that found the queue paused", func() bool { return seer.paused.Load() > 0 })
	seen := seer.paused.Load()
	if ran.Load() != 0 {
		t.Fatal("a job of a paused queue ran")
	}
	if _, err := tb.b.Resume(tb.ctx, "reports", ""); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "the job after resume", func() bool { return ran.Load() == 1 })
	// It slept between: no claim loop while paused.
	if n := seer.paused.Load(); n > seen+1 {
		t.Fatalf("%d claims found the queue paused, want the worker asleep after %d", n, seen)
	}
}
