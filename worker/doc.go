// Package worker runs job handlers: it claims due jobs from the broker for
// its free slots, handles them on a pool of goroutines, and acknowledges,
// retries or dead-letters each by its outcome.
//
// # Running a worker
//
//	reg := job.NewRegistry()
//	SendSMS.Handle(reg, func(ctx context.Context, j *job.Job[SMS]) error {
//		return provider.Send(ctx, j.Args.To, j.Args.Text)
//	})
//	w, err := worker.New(worker.Options{
//		Broker:      b, // a *broker.Broker
//		Registry:    reg,
//		Queues:      []worker.Queue{{Name: "sms", Weight: 3}, {Name: "default", Weight: 1}},
//		Concurrency: 20,
//	})
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err = w.Run(ctx) // blocks; returns after a graceful shutdown
//
// # Outcomes
//
// What a handler returns decides what happens to its job:
//
//   - nil acknowledges it: the job is deleted.
//   - retry.Permanent(err), an error after the job's last allowed retry
//     (job.MaxRetries), or a payload that does not decode moves it to the
//     dead letters with the error (see package deadletter).
//   - retry.After(d, err) schedules the next attempt exactly d later.
//   - retry.Snooze(d) schedules the job d later and gives the attempt back
//     (at most 100 times per job; then it is a failure).
//   - any other error schedules it after the backoff of the job
//     (job.WithBackoff), else of its type (job.Retry), else Options.Retry.
//
// A panic is an error carrying its stack. A handler's context is cancelled
// at its timeout (the job's, its type's or Options.Timeout), when its lease
// is lost, when its lease may have run out (cause ErrLeaseStale: see
// below), and at the end of a shutdown.
//
// # Timing and leases
//
// One Worker may serve several queues, by strict priority or by weight;
// with Options.Queues unset it serves the queues of its registered types,
// and with Queues set it logs a warning at start for each registered type
// whose queue it leaves unserved (a warning rather than an error, since a
// fleet may split queues among workers on purpose). It
// sleeps until the next ready time it knows of and is woken early when a
// producer schedules an earlier job, so a job starts within milliseconds of
// its ready time without polling. While a job runs, a heartbeat extends its
// lease, and keeps extending it after the handler returned until its
// outcome is recorded; any worker reaps leases that ran out (a crashed
// worker's jobs), and fencing tokens keep a late worker from touching a job
// it lost. Outcomes and extends go to Redis in one lane per shard, so a
// slow or failing shard delays no other.
//
// A worker knows until when each lease it holds is live: a lease from when
// the claim (or the last extend that confirmed it) was sent, by its
// monotonic clock (or by the wall clock, when more has passed by it: a
// suspended machine). A prefetched job is started only while that is more than a
// tenth of the lease away, and is handed back unrun otherwise; the handler
// of a running job whose lease may have run out is cancelled with cause
// ErrLeaseStale. Both are checked the moment the process runs again after
// a stall (SIGSTOP, a long pause, a frozen VM), before any round trip to
// Redis, so a stalled worker never starts a job another worker may have
// run meanwhile.
//
// Delivery is at least once: a job whose worker crashed, stalled or lost
// Redis for longer than Options.Lease is handed to another worker while the
// first handler may have done its work (a handler that ignores its
// cancelled context keeps running). Write handlers so that a second run is
// harmless (docs/idempotency.md in the repository shows how).
//
// # Shutdown
//
// Run blocks until its context is cancelled, then stops claiming, lets
// in-flight jobs finish until Options.ShutdownTimeout, cancels the rest and
// releases their leases without spending an attempt. Options.Services run
// for the same span: their context is Run's, and Run returns after they
// did.
package worker
