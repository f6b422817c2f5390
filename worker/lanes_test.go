package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// TestSlowShardDelaysNoOtherQueue: the replies to one queue's settle calls
// are held 2.5 s, longer than the 1 s lease, as a Redis Cluster master that
// hangs would hold them. The other queue's outcomes are recorded at once
// (one lane per shard), and the slow queue's finished jobs keep their
// leases extended until their outcomes are recorded, so that the worker's
// reaper (every 100 ms) never hands them out again: no job of either queue
// runs twice.
func TestSlowShardDelaysNoOtherQueue(t *testing.T) {
	t.Parallel()
	lw := newLossyWorker(t, true, nil)
	lw.cfg.Queues = []worker.Queue{{Name: "qa"}, {Name: "qb"}}
	lw.cfg.Concurrency = 4
	batched := testkit.Key(t, lw.b, "qa", "batched") // a key of settle.lua's alone
	stopHolding := lw.proxy.HoldReplies(func(cmd []string) bool {
		return len(cmd) > 0 && (cmd[0] == "evalsha" || cmd[0] == "EVALSHA") && slices.Contains(cmd, batched) && slices.Contains(cmd, string(protocol.LaneSettle))
	}, 2500*time.Millisecond)
	lw.start(t)
	// Retried when reaped (the handler registered for "edge" takes the
	// envelope's budget), so that a job handed out again runs again.
	typ := job.New[payload]("edge", job.MaxRetries(5))
	var ids []string
	for round := range 3 {
		for _, q := range []string{"qa", "qb"} {
			n := 5
			if q == "qb" {
				n = 20
			}
			for i := range n {
				id := fmt.Sprintf("%s-%d-%d", q, round, i)
				if _, err := typ.Enqueue(lw.ctx, lw.b, payload{}, job.ID(id), job.Queue(q)); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
		}
		time.Sleep(300 * time.Millisecond) // a few rounds of claims while qa's settles are held
	}
	redistest.WaitFor(t, 30*time.Second, "every job ran and its outcome recorded", func() bool {
		for _, q := range []string{"qa", "qb"} {
			st, err := testkit.OneStats(lw.b.Stats(lw.ctx, q))
			if err != nil || st.Scheduled+st.Processing+st.Dead > 0 {
				return false
			}
		}
		return true
	})
	if held := stopHolding(); held == 0 {
		t.Fatal("no settle reply of qa was held: the test shows nothing")
	}
	var twice []string
	for _, id := range ids {
		n, ok := lw.runs.Load(id)
		if !ok {
			t.Fatalf("job %s never ran", id)
		}
		if runs := n.(*atomic.Int32).Load(); runs != 1 {
			twice = append(twice, fmt.Sprintf("%s ran %d times", id, runs))
		}
	}
	if len(twice) > 0 {
		t.Fatalf("%d jobs ran more than once: %v", len(twice), twice)
	}
}

// TestStalePrefetchedJobNeverStarts: a worker with one goroutine and three
// prefetched jobs whose leases no heartbeat extends (as in a process that
// is stalled, or cut off from Redis) while its one handler hangs past the
// lease. The prefetched jobs are handed back, unrun, before their leases
// can run out, and never start in that worker once they may have: each
// runs once, wherever it runs. (Before the check, another worker reaped
// them and ran them, and the first ran them again when its handler
// returned.)
func TestStalePrefetchedJobNeverStarts(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var mu sync.Mutex
	runs := map[string]int{}
	release := make(chan struct{})
	var blocked atomic.Bool
	typ := job.New[json.RawMessage]("stale.prefetch", job.MaxRetries(3))
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[json.RawMessage]) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		if j.ID == "blocker" && blocked.CompareAndSwap(false, true) {
			<-release // ignores its context
		}
		return nil
	})
	if _, err := typ.Enqueue(tb.ctx, tb.b, nil, job.ID("blocker")); err != nil {
		t.Fatal(err)
	}
	claimed := &claimTally{n: map[string]int{}}
	stuck := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { claimed.Broker = p; return claimed })
	stuck.Concurrency, stuck.Prefetch = 1, 3
	stuck.Lease, stuck.HeartbeatInterval, stuck.ReapInterval = 400*time.Millisecond, -1, -1
	start(t, stuck)
	redistest.WaitFor(t, 5*time.Second, "the blocker running", blocked.Load)
	for i := range 3 {
		if _, err := typ.Enqueue(tb.ctx, tb.b, nil, job.ID(fmt.Sprintf("p%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	healthy := tb.config(t)
	healthy.Lease, healthy.ReapInterval = 400*time.Millisecond, 50*time.Millisecond
	start(t, healthy)
	redistest.WaitFor(t, 10*time.Second, "the prefetched jobs ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs["p0"] > 0 && runs["p1"] > 0 && runs["p2"] > 0
	})
	for i := range 3 {
		// Handed back once, the jobs are not claimed ahead again while
		// the only goroutine is still busy: they would wait out their
		// lease once more, keeping them from the healthy worker.
		if id := fmt.Sprintf("p%d", i); claimed.count(id) > 1 {
			t.Errorf("the stuck worker claimed %s %d times while its goroutine was busy", id, claimed.count(id))
		}
	}
	close(release) // the stuck worker's goroutine is free again
	redistest.WaitFor(t, 10*time.Second, "the queue drained", func() bool {
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, naming.DefaultQueue))
		return err == nil && st.Scheduled+st.Processing == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range 3 {
		if id := fmt.Sprintf("p%d", i); runs[id] != 1 {
			t.Errorf("prefetched job %s ran %d times", id, runs[id])
		}
	}
}

// claimTally counts the jobs a worker's claims took, by id.
type claimTally struct {
	protocol.Broker
	mu sync.Mutex
	n  map[string]int
}

func (c *claimTally) Claim(ctx context.Context, s keyspace.Shard, w protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	res, err := c.Broker.Claim(ctx, s, w, id, n, lease)
	c.mu.Lock()
	for _, j := range res.Jobs {
		c.n[j.ID]++
	}
	c.mu.Unlock()
	return res, err
}

func (c *claimTally) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// failingExtends fails every Extend, as a worker cut off from Redis sees
// it, while its other calls go through.
type failingExtends struct{ protocol.Broker }

func (failingExtends) Extend(context.Context, time.Duration, ...protocol.Lease) error {
	return errInjected
}

// TestStaleLeaseCancelsTheHandler: a handler whose lease no extend has
// confirmed for a lease (less a tenth) is cancelled with cause
// worker.ErrLeaseStale, before the lease can run out and another worker
// take the job: without a round trip to Redis, which the heartbeat could
// not make. The attempt's error says why.
func TestStaleLeaseCancelsTheHandler(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	causes := make(chan error, 1)
	typ := job.New[json.RawMessage]("stale.running", job.MaxRetries(0))
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[json.RawMessage]) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { return failingExtends{p} })
	cfg.Lease, cfg.ReapInterval = 500*time.Millisecond, -1
	start(t, cfg)
	if _, err := typ.Enqueue(tb.ctx, tb.b, nil, job.ID("s")); err != nil {
		t.Fatal(err)
	}
	var cause error
	select {
	case cause = <-causes:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was never cancelled")
	}
	if !errors.Is(cause, worker.ErrLeaseStale) {
		t.Fatalf("cancelled with cause %v, want worker.ErrLeaseStale", cause)
	}
	redistest.WaitFor(t, 10*time.Second, "the attempt recorded", func() bool {
		r, err := deadletter.New(tb.b).Get(tb.ctx, naming.DefaultQueue, "s")
		return err == nil && strings.Contains(r.Error, worker.ErrLeaseStale.Error())
	})
}
