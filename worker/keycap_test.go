package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

type order struct {
	Customer string `json:"customer"`
	N        int    `json:"n"`
}

// Under a per-key cap of 2 shared by two workers of 4 slots each, no key
// has more than 2 handlers running at once, while the other keys' jobs run
// beside them (more than 2 at once over all keys), and every job runs on
// its first attempt (a held job spends none).
func TestKeyConcurrencyCapAcrossWorkers(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[order]("order.import", job.KeyFrom(func(o order) string { return o.Customer }))
	var mu sync.Mutex
	running, most := map[string]int{}, map[string]int{}
	var all, mostAll, done, retried atomic.Int64
	typ.Handle(tb.reg, func(_ context.Context, j *job.Job[order]) error {
		if j.Attempt != 1 {
			retried.Add(1)
		}
		mu.Lock()
		running[j.Args.Customer]++
		most[j.Args.Customer] = max(most[j.Args.Customer], running[j.Args.Customer])
		mu.Unlock()
		n := all.Add(1)
		for m := mostAll.Load(); n > m && !mostAll.CompareAndSwap(m, n); m = mostAll.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		all.Add(-1)
		mu.Lock()
		running[j.Args.Customer]--
		mu.Unlock()
		done.Add(1)
		return nil
	})
	if err := tb.b.SetKeyConcurrency(tb.ctx, "default", "", 2); err != nil {
		t.Fatal(err)
	}
	var items []job.Item[order]
	for i := range 40 {
		items = append(items, job.Item[order]{Args: order{Customer: "big", N: i}})
		if i < 10 {
			for c := range 3 {
				items = append(items, job.Item[order]{Args: order{Customer: fmt.Sprintf("small%d", c), N: i}})
			}
		}
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cfg := tb.config(t)
		cfg.Concurrency = 4
		start(t, cfg)
	}
	redistest.WaitFor(t, 30*time.Second, "all jobs", func() bool { return done.Load() == int64(len(items)) })
	mu.Lock()
	defer mu.Unlock()
	for k, m := range most {
		if m > 2 {
			t.Errorf("key %s: %d handlers at once, over its cap of 2", k, m)
		}
	}
	if most["big"] != 2 {
		t.Errorf("key big reached %d at once, want its cap 2", most["big"])
	}
	if mostAll.Load() <= 2 {
		t.Errorf("at most %d handlers at once over all keys: the other keys did not run beside big", mostAll.Load())
	}
	if retried.Load() != 0 {
		t.Fatalf("%d jobs ran on a later attempt", retried.Load())
	}
}
