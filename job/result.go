package job

import (
	"context"
	"slices"
	"sync"
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

// results collects the callbacks of one attempt.
type results struct {
	mu      sync.Mutex
	fns     []func(Result)
	settled bool
	res     Result
}

type resultsKey struct{}

// WithResults returns a context that collects [OnResult] callbacks for one
// attempt, and settle, which runs them with the attempt's result. The worker
// calls it once per attempt before it calls the handler chain, and calls
// settle exactly once after the chain returned and the outcome was recorded
// (or given up). Later calls of settle do nothing.
func WithResults(ctx context.Context) (_ context.Context, settle func(Result)) {
	r := &results{}
	return context.WithValue(ctx, resultsKey{}, r), r.settle
}

func (r *results) settle(res Result) {
	r.mu.Lock()
	if r.settled {
		r.mu.Unlock()
		return
	}
	r.settled, r.res = true, res
	fns := r.fns
	r.fns = nil
	r.mu.Unlock()
	for _, f := range slices.Backward(fns) {
		f(res)
	}
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
// OnResult reports false, and never calls f, when ctx carries no collector:
// the handler was called by something other than a worker (see
// [WithResults]). Middleware then judges from the handler's error alone.
func OnResult(ctx context.Context, f func(Result)) bool {
	r, ok := ctx.Value(resultsKey{}).(*results)
	if !ok {
		return false
	}
	r.mu.Lock()
	if r.settled {
		res := r.res
		r.mu.Unlock()
		f(res)
		return true
	}
	r.fns = append(r.fns, f)
	r.mu.Unlock()
	return true
}
