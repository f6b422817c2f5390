package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/guard"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

func TestTimeoutCancelsAtDeadlineAndRetries(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const timeout = 100 * time.Millisecond
	typ := job.New[payload]("slow.report", job.Timeout(timeout), job.MaxRetries(2))
	type attempt struct {
		n         int
		cause     error
		waited    time.Duration
		deadline  time.Duration // deadline − handler start
		lastError string
	}
	var mu sync.Mutex
	var attempts []attempt
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		start := time.Now()
		a := attempt{n: j.Attempt, lastError: j.LastError}
		if d, ok := ctx.Deadline(); ok {
			a.deadline = d.Sub(start)
		}
		var err error
		if j.Attempt == 1 {
			<-ctx.Done() // a handler that only stops when told
			a.cause, a.waited = context.Cause(ctx), time.Since(start)
			err = ctx.Err()
		}
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
		return err
	})
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, fast); err != nil {
		t.Fatal(err)
	}
	run(t, tb.config(t)) // the default chain: Recover, Timeout
	redistest.WaitFor(t, 10*time.Second, "second attempt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	first, second := attempts[0], attempts[1]
	if !errors.Is(first.cause, middleware.ErrTimeout) {
		t.Errorf("first attempt's context cause %v, want ErrTimeout", first.cause)
	}
	if first.deadline <= 0 || first.deadline > timeout {
		t.Errorf("deadline %v after the handler started, want within (0, %v]", first.deadline, timeout)
	}
	if first.waited < first.deadline {
		t.Errorf("context cancelled after %v, before its deadline %v", first.waited, first.deadline)
	}
	if second.n != 2 || !strings.Contains(second.lastError, "deadline exceeded") {
		t.Errorf("retry: attempt %d with last error %q, want attempt 2 after a deadline error", second.n, second.lastError)
	}
}

func TestTimeoutDefaultAndNone(t *testing.T) {
	t.Parallel()
	deadlineOf := func(mw job.Middleware, m *job.Message) (time.Duration, bool) {
		var d time.Time
		var ok bool
		start := time.Now()
		_ = mw(job.HandlerFunc(func(ctx context.Context, _ *job.Message) error {
			d, ok = ctx.Deadline()
			return nil
		})).Handle(context.Background(), m)
		return d.Sub(start), ok
	}
	if _, ok := deadlineOf(guard.Timeout(0), &job.Message{}); ok {
		t.Error("Timeout(0) on a message without timeout set a deadline")
	}
	if d, ok := deadlineOf(guard.Timeout(time.Hour), &job.Message{}); !ok || d > time.Hour+time.Second || d < 59*time.Minute {
		t.Errorf("default timeout: deadline in %v (%v), want about 1h", d, ok)
	}
	m := &job.Message{Envelope: job.Envelope{Timeout: time.Minute}}
	if d, ok := deadlineOf(guard.Timeout(time.Hour), m); !ok || d > time.Minute+time.Second {
		t.Errorf("message timeout: deadline in %v (%v), want the message's 1m over the default", d, ok)
	}
}

func TestRecoverDeadRecordHasStack(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sr, tp := newTracing(t)
	typ := job.New[payload]("explodes", job.MaxRetries(0))
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		explode(j.Args.N)
		return nil
	})
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 7}, job.ID("boom")); err != nil {
		t.Fatal(err)
	}
	// Recover (from the default chain) outside Tracing: the panic unwinds
	// through the tracing middleware, which still ends its span.
	run(t, tb.config(t), middleware.Tracing(middleware.WithTracerProvider(tp)))
	in := deadletter.New(tb.b)
	var errText string
	redistest.WaitFor(t, 10*time.Second, "dead record", func() bool {
		r, err := in.Get(tb.ctx, "default", "boom")
		if err != nil {
			return false
		}
		errText = r.Error
		return true
	})
	for _, want := range []string{"panic: runtime error: index out of range [7]", "goroutine ", "middleware_test.explode", "recover_timeout_test.go"} {
		if !strings.Contains(errText, want) {
			t.Errorf("dead record error lacks %q:\n%s", want, errText)
		}
	}
	redistest.WaitFor(t, 5*time.Second, "consumer span", func() bool { return len(spansNamed(sr, "process default")) == 1 })
	s := spansNamed(sr, "process default")[0]
	if s.Status().Code != codes.Error || attrs(s)["delayq.job.outcome"].AsString() != "dead" || !strings.HasPrefix(s.Status().Description, "panic:") {
		t.Errorf("span status %+v outcome %q, want Error, dead, a panic description", s.Status(), attrs(s)["delayq.job.outcome"].AsString())
	}
}

func TestPanicErrorUnwrapsErrorValues(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("sentinel")
	h := guard.Recover()(job.HandlerFunc(func(context.Context, *job.Message) error { panic(sentinel) }))
	err := h.Handle(context.Background(), &job.Message{})
	var pe *middleware.PanicError
	if !errors.As(err, &pe) || !errors.Is(err, sentinel) || len(pe.Stack) == 0 {
		t.Fatalf("Recover returned %v, want a *PanicError with a stack wrapping the panic value", err)
	}
}

func explode(i int) {
	var s []int
	_ = s[i]
}
