package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

type batchArgs struct {
	N    int  `json:"n"`
	Fail bool `json:"fail"`
}

// batchRun is a batch of members in two queues with both callbacks, and
// what the handlers saw.
type batchRun struct {
	id        string
	mu        sync.Mutex
	callbacks map[string]int // callback id -> times enqueued and run
	ranBefore map[string]int // callback id -> members run when it ran
	ran       atomic.Int32
	fixed     atomic.Bool // failing members succeed from now on
}

func newBatchRun(t *testing.T, tb *testBundle, id string, members int, failing map[int]bool) *batchRun {
	t.Helper()
	r := &batchRun{id: id, callbacks: map[string]int{}, ranBefore: map[string]int{}}
	member := job.New[batchArgs]("member", job.MaxRetries(0), job.Queue("a"))
	member.Handle(tb.reg, func(ctx context.Context, j *job.Job[batchArgs]) error {
		if j.Args.Fail && !r.fixed.Load() {
			return retry.Permanent(errors.New("step failed"))
		}
		r.ran.Add(1)
		return nil
	})
	cb := job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.callbacks[m.ID]++
		r.ranBefore[m.ID] = int(r.ran.Load())
		if m.Headers["delayq-batch"] != id {
			t.Errorf("callback %s has batch header %q, want %q", m.ID, m.Headers["delayq-batch"], id)
		}
		return nil
	})
	for _, name := range []string{"batch.done", "batch.finished"} {
		if err := tb.reg.Table(registry.Key{}).Register(name, registry.Entry[job.Handler, retry.Policy]{Handler: cb}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id,
		OnSuccess:  &job.Envelope{Type: "batch.done", Queue: "cb"},
		OnComplete: &job.Envelope{Type: "batch.finished", Queue: "cb"},
	}); err != nil {
		t.Fatal(err)
	}
	envs := make([]*job.Envelope, members)
	for i := range envs {
		e, err := member.Envelope(batchArgs{N: i, Fail: failing[i]}, job.Queue([]string{"a", "b"}[i%2]), job.ID(fmt.Sprintf("m%04d", i)))
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	if err := tb.b.AddToBatch(tb.ctx, id, envs...); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(tb.ctx, id); err != nil {
		t.Fatal(err)
	}
	return r
}

func queues(names ...string) []worker.Queue {
	out := make([]worker.Queue, len(names))
	for i, n := range names {
		out[i] = worker.Queue{Name: n}
	}
	return out
}

func (r *batchRun) count(cb string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.callbacks[cb]
}

func TestBatchCallbacksFireOnceAfterTheLastMember(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const n = 300
	r := newBatchRun(t, tb, "orders-1", n, nil)
	for range 3 {
		cfg := tb.config(t)
		cfg.Queues = queues("a", "b", "cb")
		cfg.Concurrency = 8
		start(t, cfg)
	}
	complete := (r.id + ":complete")
	var st *broker.BatchStatus
	redistest.WaitFor(t, 30*time.Second, "both callbacks ran and were marked fired", func() bool {
		var err error
		st, err = tb.b.Batch(tb.ctx, r.id)
		return r.count((r.id+":success")) > 0 && r.count(complete) > 0 && err == nil && st.SuccessFired && st.CompleteFired
	})
	time.Sleep(200 * time.Millisecond) // a second enqueue would run by now
	if st.Total != n || st.Succeeded != n || st.Dead != 0 || st.Pending != 0 || !st.SuccessFired || !st.CompleteFired || !st.Complete {
		t.Fatalf("status %+v, want %d succeeded and both callbacks fired", st, n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range []string{(r.id + ":success"), complete} {
		if r.callbacks[id] != 1 || r.ranBefore[id] != n {
			t.Errorf("callback %s ran %d times, after %d members; want once, after %d", id, r.callbacks[id], r.ranBefore[id], n)
		}
	}
	for _, q := range []string{"a", "b"} {
		if v, _ := tb.rdb.HLen(tb.ctx, tb.key(q, "batched")).Result(); v != 0 {
			t.Errorf("queue %s keeps %d batch endings after they were counted", q, v)
		}
	}
}

func TestBatchWithADeadMemberCompletesAndSucceedsAfterRedrive(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := newBatchRun(t, tb, "orders-2", 20, map[int]bool{7: true})
	cfg := tb.config(t)
	cfg.Queues = queues("a", "b", "cb")
	start(t, cfg)
	redistest.WaitFor(t, 20*time.Second, "the complete callback ran", func() bool { return r.count((r.id + ":complete")) > 0 })
	// The batch marks a callback fired once its enqueue is recorded, which
	// may come just after the callback started to run.
	var st *broker.BatchStatus
	redistest.WaitFor(t, 20*time.Second, "the complete callback marked fired", func() bool {
		var err error
		st, err = tb.b.Batch(tb.ctx, r.id)
		return err == nil && st.CompleteFired
	})
	if st.Succeeded != 19 || st.Dead != 1 || !st.CompleteFired || st.SuccessFired {
		t.Fatalf("status %+v, want 19 succeeded, 1 dead, only the complete callback fired", st)
	}
	if n := r.count((r.id + ":success")); n != 0 {
		t.Fatalf("success callback ran %d times with a member dead", n)
	}
	// A person fixes the step and redrives it: the member now succeeds,
	// and the batch with it.
	r.fixed.Store(true)
	if err := deadletter.New(tb.b).Redrive(tb.ctx, "b", 0, "m0007"); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "the success callback ran and was marked fired", func() bool {
		st, _ = tb.b.Batch(tb.ctx, r.id)
		return r.count((r.id+":success")) > 0 && st != nil && st.SuccessFired
	})
	if st.Succeeded != 20 || st.Dead != 0 || !st.SuccessFired || r.count((r.id+":complete")) != 1 {
		t.Fatalf("status %+v after the redrive; complete ran %d times", st, r.count((r.id + ":complete")))
	}
}

// lostEnds drops every EndBatch call: a worker that dies right after its
// settle, again and again. The sweep must count what it left.
type lostEnds struct {
	protocol.Broker
	dropped atomic.Int32
}

func (l *lostEnds) EndBatch(ctx context.Context, s keyspace.Shard, ends []protocol.BatchEnd) error {
	l.dropped.Add(1)
	return errors.New("worker died")
}

func TestBatchEndingsLeftByADeadWorkerAreSwept(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := newBatchRun(t, tb, "orders-3", 40, nil)
	lost := &lostEnds{}
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { lost.Broker = p; return lost })
	cfg.Queues = queues("a", "b", "cb")
	cfg.ReapInterval = 200 * time.Millisecond
	start(t, cfg)
	redistest.WaitFor(t, 20*time.Second, "both callbacks ran", func() bool {
		return r.count((r.id+":success")) == 1 && r.count((r.id+":complete")) == 1
	})
	if lost.dropped.Load() == 0 {
		t.Fatal("no EndBatch call was dropped; the test shows nothing")
	}
	st, _ := tb.b.Batch(tb.ctx, r.id)
	if st.Succeeded != 40 || !st.SuccessFired || !st.CompleteFired {
		t.Fatalf("status %+v, want 40 succeeded and both fired", st)
	}
}
