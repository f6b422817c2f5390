package job

import "context"

// EnqueuerFunc adapts a function to [Enqueuer].
type EnqueuerFunc func(ctx context.Context, envs ...*Envelope) error

// Enqueue calls f(ctx, envs...).
func (f EnqueuerFunc) Enqueue(ctx context.Context, envs ...*Envelope) error { return f(ctx, envs...) }

// EnqueueMiddleware wraps an Enqueuer on the producer side, e.g. to trace or
// count enqueues. It may add headers to the envelopes before passing them on.
type EnqueueMiddleware func(Enqueuer) Enqueuer

// ChainEnqueuer wraps e in mws so that mws[0] is the outermost:
//
//	enq := job.ChainEnqueuer(b, middleware.EnqueueTracing(), middleware.EnqueueMetrics())
//	SendSMS.Enqueue(ctx, enq, SMS{...})
func ChainEnqueuer(e Enqueuer, mws ...EnqueueMiddleware) Enqueuer {
	for i := len(mws) - 1; i >= 0; i-- {
		e = mws[i](e)
	}
	return e
}
