// Package delayqtest helps test code that uses delayq: handlers, the code
// that enqueues jobs, and whole flows on a real broker.
//
// # Handlers, without Redis
//
// A [Runner] runs one attempt of a job in-process the way a worker does
// after claiming it: the registry's handler (which decodes the arguments
// with the type's codec) inside the middleware chain (the worker's default
// one unless you give another), then the worker's decision on a failure
// (the same code): retried after how long, or dead, and why. Nothing is
// stored; the [Result] says what became of the attempt, and its Require
// methods fail a test with a message that says what happened instead.
//
//	reg := job.NewRegistry()
//	SendSMS.Handle(reg, handleSMS)
//	rn := &delayqtest.Runner{Registry: reg}
//
//	res, err := delayqtest.Run(ctx, rn, SendSMS, SMS{To: "+15550100"})
//	res.RequireRetry(t, time.Second, time.Second) // a 503: retried after 1s
//
// [RunAll] runs attempt after attempt, without waiting, until the job
// succeeds or dies; [Runner.Attempt] runs any envelope at any attempt.
//
// # Code that enqueues
//
// An [Enqueuer] is a job.Enqueuer that records what it is given, deciding
// with the broker's own rules: it refuses what the broker refuses (invalid
// envelopes, payloads over the cap, pending ids), replaces and debounces
// as the broker does (job.Replace, job.Debounce, by its clock), and fills
// in what the broker fills in. [Enqueuer.Claim] and [Enqueuer.End] say
// when a worker would claim a job and when it ends. It has the broker's Cancel, Reschedule and Job, so the
// typed helpers (job.Type's Cancel, Reschedule and Lookup) work on it. [RequireEnqueuedN]
// finds the recorded jobs of a type that pass [Check]s (id, queue,
// arguments, ready time, options) and fails the test with a list of what
// was enqueued unless there are exactly as many as it wants (1, or 0 for
// none):
//
//	e := &delayqtest.Enqueuer{}
//	svc := NewService(e)
//	svc.PlaceOrder(ctx, "1001")
//	delayqtest.RequireEnqueuedN(t, e, CancelUnpaid, 1,
//		delayqtest.HasID("order-1001"), delayqtest.ReadyIn(30*time.Minute, time.Second))
//
// # A real broker
//
// [NewBroker] gives a test a broker on a Redis of its own: the server of
// REDIS_URL on a fresh namespace, else a redis-server from PATH started
// for the test, else an embedded server; t.Cleanup removes it.
// [StartWorker] runs a worker until the test ends.
//
// docs/testing.md shows each with a worked example.
package delayqtest
