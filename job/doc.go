// Package job defines what a delayed job is, on both sides of the queue.
//
// # Typed jobs
//
// A [Type] binds a job name to its payload type, so producer and consumer
// share one value and cannot drift apart:
//
//	var SendSMS = job.New[SMS]("sms.send", job.MaxRetries(8))
//
//	// producer
//	env, err := SendSMS.Enqueue(ctx, b, SMS{To: "+15550100"}, job.In(10*time.Second))
//
//	// consumer
//	SendSMS.Handle(registry, func(ctx context.Context, j *job.Job[SMS]) error {
//		return send(ctx, j.Args)
//	})
//
// # Envelopes
//
// An [Envelope] is a job on the wire: its type name, encoded payload, retry
// budget, timeout, creation time, headers (trace context) and last error.
// [Envelope.MarshalBinary] and [Decode] are its codec; payloads are encoded by
// a [Codec], JSON by default.
//
// # Handlers
//
// A [Handler] handles one delivery ([Message]); a [Registry] maps type names
// to handlers together with the type's retry policy and timeout. [Middleware]
// wraps handlers; [EnqueueMiddleware] wraps an [Enqueuer] on the producer
// side. A middleware learns what became of an attempt (acknowledged, retried,
// dead-lettered, lease lost) through [OnResult], which the worker settles
// after the handler returned.
//
// The package knows nothing of Redis; the broker package stores envelopes and
// the worker package runs handlers.
package job
