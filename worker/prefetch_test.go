package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// With Prefetch, at most Concurrency handlers run at once, the prefetched
// jobs are claimed (leased) ahead, and at shutdown the ones that never
// started are handed back unrun: another worker runs them on attempt 1.
func TestPrefetchRunsAtMostConcurrencyAndHandsBackUnstarted(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("prefetch")
	var running, peak, started atomic.Int32
	release := make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		started.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	args := make([]payload, 10)
	for i := range args {
		args[i] = payload{N: i}
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, testkit.Items(args)); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Concurrency = 2
	cfg.Prefetch = 3
	cfg.ShutdownTimeout = 2 * time.Second
	stop := start(t, cfg)
	leased := tb.key("default", "processing")
	redistest.WaitFor(t, 5*time.Second, "5 jobs leased (2 running, 3 prefetched)", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, leased).Result()
		return n == 5 && started.Load() == 2
	})
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d handlers ran at once, Concurrency is 2", p)
	}
	// Shut down: the two running finish within the deadline, the three
	// waiting are handed back without running.
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	stop()
	if s := started.Load(); s != 2 {
		t.Fatalf("%d handlers started, want the 2 that were running", s)
	}
	if n, _ := tb.rdb.ZCard(tb.ctx, leased).Result(); n != 0 {
		t.Fatalf("%d jobs still leased after shutdown", n)
	}
	// The rest runs on another worker, each on its first attempt.
	var attempts1 atomic.Int32
	reg2 := job.NewRegistry()
	typ.Handle(reg2, func(ctx context.Context, j *job.Job[payload]) error {
		if j.Attempt == 1 {
			attempts1.Add(1)
		}
		return nil
	})
	cfg2 := tb.config(t)
	cfg2.Registry = reg2
	start(t, cfg2)
	redistest.WaitFor(t, 5*time.Second, "the other 8 jobs handled on attempt 1", func() bool { return attempts1.Load() == 8 })
	redistest.WaitFor(t, 5*time.Second, "the last acks recorded", func() bool {
		n, _ := tb.rdb.Exists(tb.ctx, leased).Result()
		return n == 0
	})
	tb.queueKeysEmpty(t, naming.DefaultQueue)
}
