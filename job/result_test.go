package job_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/delayq/delayq/job"
)

func TestOnResultWithoutCollector(t *testing.T) {
	t.Parallel()
	called := false
	if job.OnResult(context.Background(), func(job.Result) { called = true }) {
		t.Fatal("OnResult reported a collector in a bare context")
	}
	if called {
		t.Fatal("callback ran without a collector")
	}
}

func TestOnResultRunsInReverseOnce(t *testing.T) {
	t.Parallel()
	ctx, a := job.WithAttempt(context.Background(), nil)
	settle := a.Settle
	var order []int
	var got []job.Result
	for i := range 3 {
		if !job.OnResult(ctx, func(r job.Result) { order = append(order, i); got = append(got, r) }) {
			t.Fatal("OnResult found no collector")
		}
	}
	boom := errors.New("boom")
	settle(job.Result{Outcome: job.OutcomeDead, Err: boom})
	settle(job.Result{Outcome: job.OutcomeSuccess}) // ignored
	if !slices.Equal(order, []int{2, 1, 0}) {
		t.Fatalf("callbacks ran in order %v, want [2 1 0]", order)
	}
	for _, r := range got {
		if r.Outcome != job.OutcomeDead || r.Err != boom {
			t.Fatalf("callback got %+v, want the first settled result", r)
		}
	}
	// Registered after settling: runs at once with the same result.
	var late job.Result
	job.OnResult(ctx, func(r job.Result) { late = r })
	if late.Outcome != job.OutcomeDead {
		t.Fatalf("late callback got %v, want dead", late.Outcome)
	}
}

func TestOnResultConcurrentSettle(t *testing.T) {
	t.Parallel()
	ctx, a := job.WithAttempt(context.Background(), nil)
	settle := a.Settle
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			job.OnResult(ctx, func(job.Result) { mu.Lock(); n++; mu.Unlock() })
		})
		wg.Go(func() { settle(job.Result{Outcome: job.OutcomeSuccess}) })
	}
	wg.Wait()
	if n != 8 {
		t.Fatalf("%d callbacks ran, want 8 (each exactly once)", n)
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	for o, want := range map[job.Outcome]string{
		job.OutcomeUnknown: "unknown", job.OutcomeSuccess: "success", job.OutcomeRetry: "retry",
		job.OutcomeDead: "dead", job.OutcomeLeaseLost: "lease_lost", job.OutcomeReleased: "released", 200: "unknown",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, got, want)
		}
	}
}

func TestChainEnqueuerOrder(t *testing.T) {
	t.Parallel()
	var trail []string
	mw := func(name string) job.EnqueueMiddleware {
		return func(next job.Enqueuer) job.Enqueuer {
			return job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
				trail = append(trail, name)
				return next.Enqueue(ctx, envs...)
			})
		}
	}
	base := job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
		trail = append(trail, "base")
		return nil
	})
	if err := job.ChainEnqueuer(base, mw("a"), mw("b")).Enqueue(context.Background(), &job.Envelope{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(trail, []string{"a", "b", "base"}) {
		t.Fatalf("call order %v, want [a b base]", trail)
	}
}
