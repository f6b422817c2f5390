// Package retry decides how long a failed job waits before its next attempt.
//
// A [Policy] maps the number of the attempt that just failed to a delay. The
// default, [Exponential], grows the delay geometrically with random jitter and
// is built on github.com/cenkalti/backoff/v4.
//
// A handler steers the decision through the error it returns:
//
//   - [Permanent] marks an error that no retry can fix: the job goes straight to
//     the dead-letter store.
//   - [After] asks for the next attempt after exactly the given delay, for
//     example to honour a Retry-After header.
//   - any other error is retried by the policy until the job's retry budget is
//     spent, then dead-lettered with that error.
//
// The delay of an ordinary failure comes from the first of: the job's own
// schedule (job.WithBackoff), its type's policy (job.Retry), the worker's
// (worker.Options.Retry), and [Default].
//
// The package knows nothing of Redis.
package retry
