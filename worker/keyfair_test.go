package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
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
