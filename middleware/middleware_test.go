package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/guard"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

func TestRecoverTurnsPanicIntoErrorWithStack(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("boom")
	h := guard.Recover()(job.HandlerFunc(func(context.Context, *job.Message) error { panic(sentinel) }))
	err := h.Handle(context.Background(), &job.Message{})
	var pe *middleware.PanicError
	if !errors.As(err, &pe) || !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "panic: boom") || !strings.Contains(err.Error(), "middleware_test.go") {
		t.Fatalf("err = %v", err)
	}
}

func TestTimeoutUsesMessageThenDefault(t *testing.T) {
	t.Parallel()
	deadline := func(m *job.Message, def time.Duration) (time.Duration, bool) {
		var left time.Duration
		var has bool
		h := guard.Timeout(def)(job.HandlerFunc(func(ctx context.Context, _ *job.Message) error {
			d, ok := ctx.Deadline()
			left, has = time.Until(d), ok
			return nil
		}))
		_ = h.Handle(context.Background(), m)
		return left, has
	}
	if left, ok := deadline(&job.Message{Envelope: job.Envelope{Timeout: time.Hour}}, time.Minute); !ok || left < 59*time.Minute {
		t.Fatalf("message timeout not applied: %v %v", left, ok)
	}
	if left, ok := deadline(&job.Message{}, time.Minute); !ok || left > time.Minute || left < 50*time.Second {
		t.Fatalf("default timeout not applied: %v %v", left, ok)
	}
	if _, ok := deadline(&job.Message{}, 0); ok {
		t.Fatal("deadline set with no timeout anywhere")
	}
}

func TestTimeoutCancelsWithCause(t *testing.T) {
	t.Parallel()
	h := guard.Timeout(20 * time.Millisecond)(job.HandlerFunc(func(ctx context.Context, _ *job.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	if err := h.Handle(context.Background(), &job.Message{}); !errors.Is(err, middleware.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
}
