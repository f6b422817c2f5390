package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// TestCorruptQueueDoesNotStopOthers: a worker serves a queue whose
// attempts counter key another program overwrote with a string (every
// claim there fails with the script's WRONGTYPE, which changed nothing), a
// queue whose shard count is not a number, and a healthy queue. The claims
// the script refuses are not taken for lost replies: that queue backs off
// with a log line naming the key, and a job enqueued into the healthy queue
// runs within a second. Once the key is repaired, the queue's job runs.
func TestCorruptQueueDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var mu sync.Mutex
	ran := map[string]time.Time{}
	typ := job.New[json.RawMessage]("corrupt.neighbour")
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[json.RawMessage]) error {
		mu.Lock()
		ran[j.ID] = time.Now()
		mu.Unlock()
		return nil
	})
	runAt := func(id string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := ran[id]
		return at, ok
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, nil, job.Queue("bad"), job.ID("stuck")); err != nil {
		t.Fatal(err)
	}
	attempts := tb.key("bad", "attempts")
	if err := tb.rdb.Set(tb.ctx, attempts, "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.rdb.HSet(tb.ctx, keyspace.ShardsKey(tb.ns), "badcount", "many").Err(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	l := zerolog.New(&logs).Level(zerolog.WarnLevel)
	cfg := tb.config(t)
	cfg.Logger = &l
	cfg.Queues = []worker.Queue{{Name: "bad"}, {Name: "badcount"}, {Name: "h"}}
	start(t, cfg)
	redistest.WaitFor(t, 5*time.Second, "the refused claim logged", func() bool {
		return strings.Contains(logs.String(), attempts) && strings.Contains(logs.String(), "claim refused by the script")
	})

	enqueued := time.Now()
	if _, err := typ.Enqueue(tb.ctx, tb.b, nil, job.Queue("h"), job.ID("healthy")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the healthy queue's job", func() bool { _, ok := runAt("healthy"); return ok })
	if at, _ := runAt("healthy"); at.Sub(enqueued) > time.Second {
		t.Fatalf("the healthy queue's job ran %v after it was enqueued; want within a second", at.Sub(enqueued))
	}
	if _, ok := runAt("stuck"); ok {
		t.Fatal("the job of the corrupt queue ran")
	}
	if strings.Contains(logs.String(), "sending it again before claiming more") {
		t.Fatalf("a refused claim was taken for a lost reply:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"queue":"badcount"`) {
		t.Fatalf("the queue whose shard count is not a number was not named:\n%s", logs.String())
	}

	// Repaired, the queue goes on (within its back-off, at most 10 s).
	if err := tb.rdb.Del(tb.ctx, attempts).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "the repaired queue's job", func() bool { _, ok := runAt("stuck"); return ok })
}

// downShard fails every claim of one queue with a connection error, as a
// shard whose master does not answer does.
type downShard struct {
	protocol.Broker
	queue string
}

func (d downShard) Claim(ctx context.Context, s keyspace.Shard, w protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	if s.Queue() == d.queue {
		return protocol.ClaimResult{}, errInjected
	}
	return d.Broker.Claim(ctx, s, w, id, n, lease)
}

// TestDownShardKeepsNoSlots: a claim whose reply was lost is sent again
// before anything else is claimed from its shard, its slots kept for its
// jobs; but a shard that never answers keeps them for at most nine tenths
// of a lease (its jobs would come too late to start), and the other
// queue's jobs then run.
func TestDownShardKeepsNoSlots(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var ran atomic.Bool
	typ := job.New[json.RawMessage]("down.neighbour")
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[json.RawMessage]) error {
		ran.Store(true)
		return nil
	})
	var logs syncBuffer
	l := zerolog.New(&logs).Level(zerolog.WarnLevel)
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { return downShard{p, "down"} })
	cfg.Logger = &l
	cfg.Lease, cfg.Concurrency, cfg.Prefetch = time.Second, 2, -1
	cfg.Queues = []worker.Queue{{Name: "down"}, {Name: "up"}}
	start(t, cfg)
	redistest.WaitFor(t, 5*time.Second, "the lost claim", func() bool {
		return strings.Contains(logs.String(), "sending it again before claiming more from this shard")
	})
	if _, err := typ.Enqueue(tb.ctx, tb.b, nil, job.Queue("up")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the other queue's job", ran.Load)
	if !strings.Contains(logs.String(), "did not answer again within the lease") {
		t.Fatalf("the other queue's job ran, but not because the lost claim gave up its slots:\n%s", logs.String())
	}
}
