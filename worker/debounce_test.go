package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestDebouncedJobRunsOnce: 50 debounced enqueues of one key leave one job,
// which a worker runs once, with the last call's arguments.
func TestDebouncedJobRunsOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	digest := job.New[payload]("debounce.digest")
	var mu sync.Mutex
	var seen []int
	digest.Handle(tb.reg, func(_ context.Context, j *job.Job[payload]) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, j.Args.N)
		return nil
	})
	for i := 1; i <= 50; i++ {
		if _, err := digest.Enqueue(tb.ctx, tb.b, payload{N: i}, job.Debounce("user-7", 200*time.Millisecond)); err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	start(t, tb.config(t))
	redistest.WaitFor(t, 10*time.Second, "the job ran and was acked", func() bool {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
		return n > 0 && err == nil && st.Scheduled == 0 && st.Processing == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != 50 {
		t.Fatalf("handled %v, want one run with n 50", seen)
	}
	tb.queueKeysEmpty(t, "default")
}
