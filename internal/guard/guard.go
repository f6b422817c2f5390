// Package guard holds the two middlewares the worker and
// delayqtest.Runner put around every handler, inside the user's chain: the
// attempt's deadline (Timeout) and panic recovery (Recover), and Chain,
// which builds that chain. They are not part of the public API because no
// program needs to call them: every attempt gets them, and a program lists
// its middleware in worker.Options.Middleware.
package guard

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

// Recover turns a panic in the handler into a *middleware.PanicError. The
// job is then retried or dead-lettered like any failure.
func Recover() job.Middleware {
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &middleware.PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next.Handle(ctx, m)
		})
	}
}

// Timeout gives each attempt a context that is cancelled, with cause
// middleware.ErrTimeout, after the message's Timeout (the worker fills it
// in from the job, its type or its own default), or after def when the
// message has none. With neither the context has no deadline. A handler
// that returns because of it fails the attempt, which is retried.
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
			ctx, cancel := context.WithTimeoutCause(ctx, d, middleware.ErrTimeout)
			defer cancel()
			return next.Handle(ctx, m)
		})
	}
}

// Chain wraps h in mws so that mws[0] is the outermost.
func Chain(h job.Handler, mws ...job.Middleware) job.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
