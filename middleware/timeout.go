package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/delayq/delayq/job"
)

// ErrTimeout is the cause of a handler context cancelled by [Timeout].
var ErrTimeout = errors.New("job: handler deadline exceeded")

// Timeout gives each attempt a context that is cancelled, with cause
// ErrTimeout, after the message's Timeout (the worker fills it in from the
// job, its type or its own default), or after def when the message has none.
// With neither the context has no deadline. A handler that returns because
// of it fails the attempt, which is retried.
func Timeout(def time.Duration) job.Middleware {
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			d := m.Timeout
			if d <= 0 {
				d = def
			}
			if d <= 0 {
				return next.Handle(ctx, m)
			}
			ctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
			defer cancel()
			return next.Handle(ctx, m)
		})
	}
}
