package job

import (
	"context"
	"time"
)

// Outcome is what became of one handling attempt once the worker recorded
// it. The zero value is OutcomeUnknown.
type Outcome uint8

// Outcomes of an attempt.
const (
	OutcomeUnknown   Outcome = iota
	OutcomeSuccess           // the handler succeeded and the job was acknowledged
	OutcomeRetry             // the attempt failed; the job is scheduled again after Result.Delay
	OutcomeDead              // the attempt failed for good; the job is in the dead-letter store
	OutcomeLeaseLost         // the worker could not record the outcome: see Result.Lost
	OutcomeReleased          // handed back unfinished at shutdown, no attempt spent
)

var outcomeNames = [...]string{"unknown", "success", "retry", "dead", "lease_lost", "released"}

// String returns the outcome's label as metrics and logs use it: "success",
// "retry", "dead", "lease_lost", "released" or "unknown".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Result is the settled outcome of one attempt, passed to the callbacks
// registered with [OnResult].
type Result struct {
	Outcome Outcome
	// Err is what the handler chain returned (a panic's *PanicError
	// included); nil when it succeeded.
	Err error
	// Delay is how long until the next attempt, for OutcomeRetry.
	Delay time.Duration
	// Lost says why the worker could not record the outcome, for
	// OutcomeLeaseLost: it wraps broker.ErrLeaseLost when the lease ran out
	// and the job was taken back (or another worker finished it), or is the
	// Redis error that outlasted the lease. Either way the job is, or will
	// be, handled again.
	Lost error
}

// OnResult registers f to be called once with the final result of the
// attempt that ctx belongs to. Middleware uses it to learn what the worker
// decided after the handler returned: retry or dead-letter, and whether the
// acknowledgement, retry or dead-lettering was refused because the lease was
// lost.
//
// Callbacks run in reverse order of registration, like deferred calls, after
// the handler chain has returned, on a worker goroutine; they must not block.
// A callback registered after the attempt settled runs at once.
//
// OnResult reports false, and never calls f, when ctx carries no attempt:
// the handler was called by something other than a worker or the test
// kit's delayqtest.Runner. Middleware then judges from the handler's error
// alone.
func OnResult(ctx context.Context, f func(Result)) bool {
	a := attemptOf(ctx)
	if a == nil {
		return false
	}
	a.OnResult(f)
	return true
}
