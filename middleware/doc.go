// Package middleware wraps job handlers: func(job.Handler) job.Handler.
//
// The worker runs [Recover] and [Timeout] by default. Compose more with
// job.Chain or the worker's Middleware setting; the first is the outermost.
//
// A middleware sees every attempt of every job type: the message (type, id,
// queue, attempt, last error, headers) before the handler, and the error
// after it. Return the handler's error unchanged, or wrapped with %w, so
// that retry.Permanent and retry.After still steer the worker:
//
//	func Audit(next job.Handler) job.Handler {
//		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
//			err := next.Handle(ctx, m)
//			audit.Record(m.Type, m.ID, m.Attempt, err)
//			return err
//		})
//	}
//
//	worker.Config{..., Middleware: append(worker.DefaultMiddleware(), Audit)}
package middleware
