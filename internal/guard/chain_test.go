package guard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/guard"
	"github.com/delayq/delayq/job"
)

func TestChainOrder(t *testing.T) {
	t.Parallel()
	var trace []string
	mw := func(name string) job.Middleware {
		return func(next job.Handler) job.Handler {
			return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
				trace = append(trace, name)
				return next.Handle(ctx, m)
			})
		}
	}
	h := guard.Chain(job.HandlerFunc(func(context.Context, *job.Message) error { trace = append(trace, "handler"); return nil }), mw("outer"), mw("inner"))
	_ = h.Handle(context.Background(), &job.Message{})
	if strings.Join(trace, ",") != "outer,inner,handler" {
		t.Fatalf("order %v", trace)
	}
}
