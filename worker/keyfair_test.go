package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// TestKeyFairnessLetsAKeyPastAFlood: key A floods 3,000 due jobs; then key
// B enqueues 20 jobs, one at a time, each once the one before has run.
// With fair turns each of B's jobs starts within a few claims of its
// enqueue: fewer than 3 x (Concurrency + the most a worker prefetches)
// other starts come between its enqueue and its start, counted by a
// sequence of handler starts, not by a clock. In ready order (turns off)
// the first of B's jobs waits behind A's whole backlog.
func TestKeyFairnessLetsAKeyPastAFlood(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{true, false} {
		name := map[bool]string{true: "fair", false: "ready-order"}[fair]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			typ := job.New[payload]("notify.send")
			var starts atomic.Int64
			var mu sync.Mutex
			bStarted := map[int]int64{} // B's job -> the start sequence at its start
			bDone := make(chan int, 20)
			typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
				seq := starts.Add(1)
				if j.Key == "B" {
					mu.Lock()
					bStarted[j.Args.N] = seq
					mu.Unlock()
					bDone <- j.Args.N
					return nil
				}
				time.Sleep(time.Millisecond)
				return nil
			})
			if err := tb.b.SetKeyFairness(tb.ctx, "default", fair); err != nil {
				t.Fatal(err)
			}
			items := make([]job.Item[payload], 3000)
			for i := range items {
				items[i] = job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.Key("A")}}
			}
			if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
				t.Fatal(err)
			}
			cfg := tb.config(t)
			cfg.Concurrency = 4
			start(t, cfg)
			redistest.WaitFor(t, 10*time.Second, "A's flood started", func() bool { return starts.Load() > 50 })
			// The most a worker prefetches is 100 (its adaptive prefetch's
			// bound): jobs already in it start first.
			bound := int64(3 * (cfg.Concurrency + 100))
			worst := int64(0)
			for i := range 20 {
				before := starts.Load()
				if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: i}, job.Key("B")); err != nil {
					t.Fatal(err)
				}
				select {
				case <-bDone:
				case <-time.After(30 * time.Second):
					t.Fatalf("B's job %d did not run", i)
				}
				mu.Lock()
				between := bStarted[i] - before - 1
				mu.Unlock()
				worst = max(worst, between)
				if !fair {
					break // one is enough to show the backlog
				}
			}
			t.Logf("%s: at most %d starts between one of B's enqueues and its start", name, worst)
			if fair && worst >= bound {
				t.Errorf("with fair turns %d starts came between one of B's enqueues and its start, want under %d", worst, bound)
			}
			if !fair && worst < bound {
				t.Errorf("in ready order only %d starts came before B's first job: the flood did not show", worst)
			}
		})
	}
}

// TestKeyFairnessBatchMembersEndWhileWaiting: batch members of key A wait
// for their turn behind 300 of A's jobs, in A's held set. One is
// cancelled there, two expire there (one dead-lettered, one dropped with
// job.DropExpired) and one runs: the batch counts 1 succeeded, 1 dead and
// 2 gone, its complete callback runs once and its success callback never,
// the expired members never run, and once the queue drains no held job
// or count of A is left.
func TestKeyFairnessBatchMembersEndWhileWaiting(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const flood = 300
	var mu sync.Mutex
	ran := map[string]int{}
	member := job.New[payload]("fair.member")
	member.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		ran[j.ID]++
		mu.Unlock()
		return nil
	})
	cb := job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		mu.Lock()
		ran[m.ID]++
		mu.Unlock()
		return nil
	})
	for _, name := range []string{"fair.success", "fair.complete"} {
		if err := tb.reg.Table(registry.Key{}).Register(name, registry.Entry[job.Handler, retry.Policy]{Handler: cb, Queue: "cb"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.SetKeyFairness(tb.ctx, "default", true); err != nil {
		t.Fatal(err)
	}
	items := make([]job.Item[payload], flood)
	for i := range items {
		items[i] = job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.Key("A"), job.ID(fmt.Sprintf("A.%03d", i))}}
	}
	if _, err := member.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
	const id = "fair-batch"
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id,
		OnSuccess:  &job.Envelope{Type: "fair.success", Queue: "cb"},
		OnComplete: &job.Envelope{Type: "fair.complete", Queue: "cb"},
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	expired := []job.Option{job.At(now.Add(-2 * time.Second)), job.ExpireAt(now.Add(-time.Second))}
	opts := map[string][]job.Option{
		"m-ok":     nil,
		"m-cancel": nil,
		"m-exp":    expired,
		"m-drop":   append(append([]job.Option{}, expired...), job.DropExpired()),
	}
	var envs []*job.Envelope
	for _, name := range []string{"m-ok", "m-cancel", "m-exp", "m-drop"} {
		e, err := member.Envelope(payload{}, append(opts[name], job.Key("A"), job.ID(name))...)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := tb.b.AddToBatch(tb.ctx, id, envs...); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(tb.ctx, id); err != nil {
		t.Fatal(err)
	}
	// Every job of A waits for its turn in A's held set.
	hk, err := tb.b.HeldKeys(tb.ctx, "default", 10)
	if err != nil || len(hk.Keys) != 1 || hk.Keys[0].Key != "A" || hk.Keys[0].Held != flood+4 || hk.Keys[0].Reason != "turn" {
		t.Fatalf("held keys %+v, %v; want A holding %d, waiting for its turn", hk, err, flood+4)
	}
	if _, err := tb.b.Cancel(tb.ctx, "default", "m-cancel"); err != nil {
		t.Fatalf("cancel of a member waiting for its turn: %v", err)
	}
	if hk, err := tb.b.HeldKeys(tb.ctx, "default", 10); err != nil || len(hk.Keys) != 1 || hk.Keys[0].Held != flood+3 {
		t.Fatalf("after the cancel: %+v, %v; want A holding %d", hk, err, flood+3)
	}
	cfg := tb.config(t)
	cfg.Queues = queues("default", "cb")
	cfg.Concurrency = 4
	start(t, cfg)
	redistest.WaitFor(t, 30*time.Second, "the complete callback ran and the queues drained", func() bool {
		mu.Lock()
		done := ran[(id+":complete")] > 0
		mu.Unlock()
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
		cbst, cerr := testkit.OneStats(tb.b.Stats(tb.ctx, "cb"))
		return done && err == nil && cerr == nil && st.Scheduled == 0 && st.Processing == 0 && st.HeldByKey == 0 &&
			cbst.Scheduled == 0 && cbst.Processing == 0
	})
	st, err := tb.b.Batch(tb.ctx, id)
	if err != nil || st.Total != 4 || st.Succeeded != 1 || st.Dead != 1 || st.Gone != 2 || !st.Complete || !st.CompleteFired || st.SuccessFired {
		t.Fatalf("batch %+v, %v; want 1 succeeded, 1 dead, 2 gone, the complete callback fired alone", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran[(id+":complete")] != 1 || ran[(id+":success")] != 0 {
		t.Errorf("complete callback ran %d times, success %d; want once and never", ran[(id+":complete")], ran[(id+":success")])
	}
	for _, m := range []string{"m-cancel", "m-exp", "m-drop"} {
		if ran[m] != 0 {
			t.Errorf("%s ran %d times, want never", m, ran[m])
		}
	}
	if ran["m-ok"] != 1 {
		t.Errorf("m-ok ran %d times, want once", ran["m-ok"])
	}
	for i := range flood {
		if n := ran[fmt.Sprintf("A.%03d", i)]; n != 1 {
			t.Fatalf("A.%03d ran %d times, want once", i, n)
		}
	}
	rec, err := deadletter.New(tb.b).Get(tb.ctx, "default", "m-exp")
	if err != nil || rec.Reason != broker.ReasonExpired {
		t.Errorf("dead record of m-exp: %+v, %v; want it expired", rec, err)
	}
	if _, err := deadletter.New(tb.b).Get(tb.ctx, "default", "m-drop"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("m-drop in the dead letters: %v; want it dropped", err)
	}
	if hk, err := tb.b.HeldKeys(tb.ctx, "default", 10); err != nil || len(hk.Keys) != 0 {
		t.Errorf("held keys after the drain: %+v, %v; want none", hk, err)
	}
}

// TestKeyFairnessInThePrefetch: the jobs a worker claims ahead of its
// runners start in turns between keys as well. One claim of 21 (one
// runner, a prefetch of 20) takes 10 of A's backlog, B's one job, then 10
// more of A's (the claim's turns); the worker starts B's job within one
// job of A's after the running one, not behind A's ten.
func TestKeyFairnessInThePrefetch(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("notify.send")
	var mu sync.Mutex
	var order []string
	gate := make(chan struct{})
	first := true
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		order = append(order, fmt.Sprintf("%s%d", j.Key, j.Args.N))
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-gate // the first job runs until the claim's jobs are all held
		}
		return nil
	})
	if err := tb.b.SetKeyFairness(tb.ctx, "default", true); err != nil {
		t.Fatal(err)
	}
	items := make([]job.Item[payload], 200)
	for i := range items {
		items[i] = job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.Key("A")}}
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 0}, job.Key("B")); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Concurrency = 1
	cfg.Prefetch = 20
	start(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "the first claim's 21 jobs leased", func() bool {
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
		return err == nil && st.Processing == 21
	})
	close(gate)
	redistest.WaitFor(t, 10*time.Second, "B's job run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(order, "B0")
	})
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(order, "B0"); i > 2 {
		t.Fatalf("B's job started after %d of A's (%v), want at most 2: the one running and one turn of A's", i, order[:i+1])
	}
}
