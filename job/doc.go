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
// # Options
//
// Options set a job's properties, and their types say where they may be
// given, so that one in the wrong place does not compile. A [TypeOption] is
// a default of a type, given to [New] ([Retry], [WithCodec]); an [Option]
// belongs to one job, given where it is built or enqueued ([In], [At],
// [ID], [WithBackoff], [Header], [Replace], [Debounce], [ExpireAt],
// [Then]); a [SharedOption] is valid in both places, per job overriding
// the type's default ([Queue], [MaxRetries], [Timeout], [Retain],
// [Unique], [UniqueIncludeDead], [ExpireIn], [DropExpired]). An invalid
// value is an error wrapping [ErrInvalid].
//
// An id names a job within its queue while it is pending. Give one that
// names what the job is about, and enqueueing becomes idempotent: a second
// job with a pending id is refused with broker.ErrDuplicate.
//
//	_, err := CancelUnpaid.Enqueue(ctx, b, Order{ID: "1001"}, job.ID("order-1001"), job.In(30*time.Minute))
//
// [Unique] keeps a job unique while it is pending and for a window after
// it succeeded (with no id, the id is derived from the type and
// arguments); [Replace] replaces a scheduled job's arguments and ready
// time; [Debounce] coalesces a burst of enqueues of one key into one job
// with the last arguments, ready a window after the last; [ExpireAt] and [ExpireIn] keep a job that has not started by then
// from ever running. See docs/scheduling.md.
//
// Delivery is at least once: a handler may see the same job again after a
// crash or a lost lease (Message.Attempt counts the attempts), so it should
// check the state it acts on before a side effect.
//
// # Defaults and limits
//
// A job that names no queue goes to the queue "default"; a type that sets
// no [MaxRetries] gives its jobs 10 retries after the first attempt. The
// limits, each checked where the value is given, with an error wrapping
// [ErrInvalid] that names the limit:
//
//   - a job id ([ID], the key of [Debounce]): 256 bytes
//   - a queue name ([Queue]): 64 bytes
//   - a job type name ([New]): 128 bytes
//   - a flow-control key ([Key], [KeyFrom]): 128 bytes
//   - a batch id (broker.Broker.CreateBatch): 128 bytes
//   - next jobs ([Then], and as many more by [Next] from a handler): 100
//   - a result ([SetResult]): 1 MiB
//   - a progress message ([ReportProgress]): 200 bytes
//
// The last error an envelope keeps (Envelope.LastError) is cut to 16 KiB,
// marked "(truncated)".
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
