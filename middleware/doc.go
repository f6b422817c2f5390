// Package middleware wraps job handlers (job.Middleware, func(job.Handler)
// job.Handler) and producers (job.EnqueueMiddleware, func(job.Enqueuer)
// job.Enqueuer).
//
// # Handler middleware
//
//   - [Tracing] starts an OpenTelemetry CONSUMER span per attempt, a child of
//     the producer's span carried in the envelope's headers.
//   - [Metrics] counts attempts by outcome and records durations and
//     lateness with the OpenTelemetry metric API.
//   - [Logging] writes one zerolog line per attempt's outcome.
//
// The worker runs every handler inside its own deadline (the context is
// cancelled with cause [ErrTimeout]) and panic recovery (a panic becomes a
// *[PanicError] carrying the stack); give it these in
// worker.Options.Middleware, which wraps those two:
//
//	worker.Options{..., Middleware: []job.Middleware{middleware.Tracing(), middleware.Metrics(), middleware.Logging(logger)}}
//
// Tracing, Metrics and Logging report what the worker decided after the
// handler returned (acknowledged, retried, dead-lettered, lease lost or
// released at shutdown), which they learn through job.OnResult.
//
// # Producer middleware
//
// [EnqueueTracing] starts a PRODUCER span per envelope and writes its
// context into the envelope's headers; [EnqueueMetrics] counts stored jobs.
// Wrap the broker with job.ChainEnqueuer and enqueue through the result:
//
//	enq := job.ChainEnqueuer(b, middleware.EnqueueTracing(), middleware.EnqueueMetrics())
//	SendSMS.Enqueue(ctx, enq, SMS{To: "+15550100"}, job.In(time.Hour))
//
// [ObserveQueues] adds gauges of queue depths read from the broker.
//
// Names of spans, attributes, metrics and log fields are listed, with
// samples, in docs/observability.md.
//
// # Writing one
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
//	worker.Options{..., Middleware: []job.Middleware{Audit}}
package middleware
