package worker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// outcomes records the results the worker settles, per job id, through
// job.OnResult, as a middleware would.
type outcomes struct {
	mu  sync.Mutex
	got map[string][]job.Result
}

func (o *outcomes) middleware(t *testing.T) job.Middleware {
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			id := m.ID
			if !job.OnResult(ctx, func(r job.Result) {
				o.mu.Lock()
				defer o.mu.Unlock()
				o.got[id] = append(o.got[id], r)
			}) {
				t.Errorf("job %s: the worker's context carries no result collector", id)
			}
			return next.Handle(ctx, m)
		})
	}
}

func (o *outcomes) of(id string) []job.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got[id])
}

func (o *outcomes) kinds(id string) []job.Outcome {
	var out []job.Outcome
	for _, r := range o.of(id) {
		out = append(out, r.Outcome)
	}
	return out
}

func TestOutcomesReachMiddleware(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	rec := &outcomes{got: map[string][]job.Result{}}
	fast := job.WithBackoff(retry.Exponential{Initial: 10 * time.Millisecond, Multiplier: 1, Max: 10 * time.Millisecond})
	typ := job.New[payload]("outcome")
	hold := make(chan struct{})
	held := make(chan struct{}, 1)
	var mu sync.Mutex
	seen := map[string]int{}
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		seen[j.ID]++
		n := seen[j.ID]
		mu.Unlock()
		switch j.ID {
		case "retry-once":
			if n == 1 {
				return errors.New("first attempt fails")
			}
		case "permanent":
			return retry.Permanent(errors.New("bad input"))
		case "lost":
			held <- struct{}{}
			<-hold
		}
		return nil
	})
	cfg := tb.config(t)
	cfg.Middleware = []job.Middleware{rec.middleware(t)}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for _, id := range []string{"ok", "retry-once", "permanent", "lost"} {
		if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID(id), fast); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "orphan-type", Type: "nobody.handles.this"}); err != nil {
		t.Fatal(err)
	}
	// Take the lease of "lost" away while its handler runs, as a reaper's
	// redelivery to another worker would: its fencing token changes.
	<-held
	if err := tb.rdb.HSet(tb.ctx, tb.key("default", "leases"), "lost", "stolen").Err(); err != nil {
		t.Fatal(err)
	}
	close(hold)

	redistest.WaitFor(t, 10*time.Second, "every outcome settled", func() bool {
		return len(rec.of("ok")) == 1 && len(rec.of("retry-once")) == 2 && len(rec.of("permanent")) == 1 &&
			len(rec.of("lost")) == 1 && len(rec.of("orphan-type")) == 1
	})
	want := map[string][]job.Outcome{
		"ok":          {job.OutcomeSuccess},
		"retry-once":  {job.OutcomeRetry, job.OutcomeSuccess},
		"permanent":   {job.OutcomeDead},
		"lost":        {job.OutcomeLeaseLost},
		"orphan-type": {job.OutcomeDead},
	}
	for id, w := range want {
		if got := rec.kinds(id); !slices.Equal(got, w) {
			t.Errorf("job %s: outcomes %v, want %v", id, got, w)
		}
	}
	if r := rec.of("retry-once")[0]; r.Err == nil || r.Delay != 10*time.Millisecond {
		t.Errorf("retry result %+v, want the handler's error and a 10ms delay", r)
	}
	if r := rec.of("permanent")[0]; !retrydecide.IsPermanent(r.Err) {
		t.Errorf("dead result error %v, want the permanent error", r.Err)
	}
	if r := rec.of("lost")[0]; !errors.Is(r.Lost, broker.ErrLeaseLost) || r.Err != nil {
		t.Errorf("lease-lost result %+v, want Lost wrapping broker.ErrLeaseLost and no handler error", r)
	}
	if r := rec.of("orphan-type")[0]; r.Err == nil || !strings.Contains(r.Err.Error(), "no handler registered") {
		t.Errorf("unknown type result %+v, want a no-handler error", r)
	}
}

func TestOutcomeReleasedAtShutdown(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	rec := &outcomes{got: map[string][]job.Result{}}
	typ := job.New[payload]("stubborn")
	started := make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	cfg := tb.config(t)
	cfg.ShutdownTimeout = 50 * time.Millisecond
	cfg.Middleware = []job.Middleware{rec.middleware(t)}
	stop := start(t, cfg)
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID("slow")); err != nil {
		t.Fatal(err)
	}
	<-started
	stop()
	if got := rec.kinds("slow"); !slices.Equal(got, []job.Outcome{job.OutcomeReleased}) {
		t.Fatalf("outcomes %v, want [released]", got)
	}
}

// TestMiddlewareWrapsTheWorkersOwn: Options.Middleware runs in order,
// the first outermost, around the worker's own deadline and panic
// recovery: the handler has the deadline, and a panic reaches the
// middleware as the attempt's *middleware.PanicError. A nil entry is
// refused, naming it.
func TestMiddlewareWrapsTheWorkersOwn(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("used", job.MaxRetries(0))
	var mu sync.Mutex
	var trail []string
	note := func(s string) {
		mu.Lock()
		trail = append(trail, s)
		mu.Unlock()
	}
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if _, ok := ctx.Deadline(); ok {
			note("handler with a deadline")
		} else {
			note("handler without a deadline")
		}
		panic("boom")
	})
	named := func(name string) job.Middleware {
		return func(next job.Handler) job.Handler {
			return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
				note(name)
				err := next.Handle(ctx, m)
				var pe *middleware.PanicError
				if errors.As(err, &pe) {
					note(name + " saw the panic")
				}
				return err
			})
		}
	}
	cfg := tb.config(t)
	cfg.Timeout = time.Minute // the worker's deadline
	cfg.Middleware = []job.Middleware{named("a"), named("b")}
	bad := cfg
	bad.Middleware = []job.Middleware{named("a"), nil}
	if _, err := worker.New(bad); err == nil || !strings.Contains(err.Error(), "Options.Middleware[1] is nil") {
		t.Fatalf("New with a nil middleware: %v, want it refused naming Options.Middleware[1]", err)
	}
	start(t, cfg)
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "b", "handler with a deadline", "b saw the panic", "a saw the panic"}
	redistest.WaitFor(t, 5*time.Second, "job handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(trail) >= len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(trail, want) {
		t.Fatalf("trail %q, want %q", trail, want)
	}
}

// TestMiddlewareWrapsEachTypeOnce: the worker builds a type's chain once
// and runs every attempt through it, for types registered before Run and
// after it started alike.
func TestMiddlewareWrapsEachTypeOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var mu sync.Mutex
	wraps, calls := map[string]int{}, map[string]int{}
	count := func(next job.Handler) job.Handler {
		mu.Lock()
		wraps["chain"]++
		mu.Unlock()
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			mu.Lock()
			calls[m.Type]++
			mu.Unlock()
			return next.Handle(ctx, m)
		})
	}
	early := job.New[payload]("wrap.early")
	early.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return nil })
	cfg := tb.config(t)
	cfg.Middleware = []job.Middleware{count}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const n = 20
	if _, err := early.EnqueueItems(tb.ctx, tb.b, testkit.Items(make([]payload, n))); err != nil {
		t.Fatal(err)
	}
	late := job.New[payload]("wrap.late")
	late.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return nil })
	if _, err := late.EnqueueItems(tb.ctx, tb.b, testkit.Items(make([]payload, n))); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "every job through the middleware", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls["wrap.early"] == n && calls["wrap.late"] == n
	})
	mu.Lock()
	defer mu.Unlock()
	if wraps["chain"] != 2 {
		t.Fatalf("the middleware wrapped a handler %d times for 2 types and %d attempts, want once per type", wraps["chain"], 2*n)
	}
}
