// Package worker runs job handlers: it claims due jobs from the broker for
// its free slots, handles them on a pool of goroutines, and acknowledges,
// retries or dead-letters each by its outcome.
//
// One Worker may serve several queues, by strict priority or by weight. It
// sleeps until the next ready time it knows of and is woken early when a
// producer schedules an earlier job, so a job starts within milliseconds of
// its ready time without polling. While a job runs, a heartbeat extends its
// lease; any worker reaps leases that ran out (a crashed worker's jobs), and
// fencing tokens keep a late worker from touching a job it lost.
//
// Run blocks until its context is cancelled, then stops claiming, lets
// in-flight jobs finish until Config.ShutdownTimeout, cancels the rest and
// releases their leases without spending an attempt.
package worker
