package worker_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// TestWorkerForgetsIdleQueues: a worker unlists the namespace's queues
// unused for Options.ForgetIdleQueues that hold nothing, and never its
// own, however long ago they were used: it lists them again first. A
// ForgetIdleQueues below admin.MinForgetIdle is refused.
func TestWorkerForgetsIdleQueues(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	long := strconv.FormatInt(time.Now().Add(-3*time.Hour).UnixMilli(), 10)
	// Another process used both queues, three hours ago.
	other := testkit.NewBroker(t, tb.rdb, broker.Options{Namespace: tb.ns})
	for _, q := range []string{"stale", "served"} {
		if err := other.DeclareQueue(tb.ctx, q, 1); err != nil {
			t.Fatal(err)
		}
		if err := tb.rdb.HSet(tb.ctx, keyspace.QueuesSeenKey(tb.ns), q, long).Err(); err != nil {
			t.Fatal(err)
		}
	}
	bad := tb.config(t)
	bad.ForgetIdleQueues = time.Minute
	if _, err := worker.New(bad); err == nil || !strings.Contains(err.Error(), "Options.ForgetIdleQueues 1m0s") {
		t.Fatalf("New with ForgetIdleQueues 1m: %v, want it refused, naming it", err)
	}
	cfg := tb.config(t)
	cfg.Queues = []worker.Queue{{Name: "served"}}
	cfg.ForgetIdleQueues = time.Hour
	start(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "the stale queue forgotten", func() bool {
		ok, err := protocol.Admin(tb.b).Known(tb.ctx, "stale")
		return err == nil && !ok
	})
	listed, err := protocol.Admin(tb.b).Queues(tb.ctx)
	if err != nil || !slices.Contains(listed, "served") {
		t.Fatalf("queues listed %v (%v): want the worker's own kept", listed, err)
	}
	at, err := tb.rdb.HGet(tb.ctx, keyspace.QueuesSeenKey(tb.ns), "served").Int64()
	if err != nil || time.Since(time.UnixMilli(at)) > time.Minute {
		t.Fatalf("the served queue's last use: %v (%v), want now", time.UnixMilli(at), err)
	}
	if _, err := (job.New[payload]("late", job.Queue("stale"))).Enqueue(tb.ctx, tb.b, payload{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := protocol.Admin(tb.b).Known(tb.ctx, "stale"); err != nil || !ok {
		t.Fatalf("after an enqueue the forgotten queue is listed: %v, %v", ok, err)
	}
}
