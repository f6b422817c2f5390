package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/job"
)

// errPanicked stands in for the error of a handler that panicked through an
// observing middleware outside a worker (inside one, the worker reports the
// *PanicError).
var errPanicked = errors.New("handler panicked")

// observe calls next and then done, once, with the attempt's result and the
// time the handler chain below returned. Under a worker the result is the
// worker's (job.OnResult), so it says what was recorded: acknowledged,
// retried, dead-lettered or lease lost. Elsewhere it is judged from the
// handler's error alone (see judge).
func observe(ctx context.Context, m *job.Message, next job.Handler, done func(res job.Result, end time.Time)) error {
	var end time.Time
	if job.OnResult(ctx, func(res job.Result) { done(res, end) }) {
		// The worker settles after the chain returned, so end is set by
		// then, also when the handler panicked.
		defer func() { end = time.Now() }()
		return next.Handle(ctx, m)
	}
	returned := false
	defer func() {
		if !returned {
			done(job.Result{Outcome: job.OutcomeUnknown, Err: errPanicked}, time.Now())
		}
	}()
	err := next.Handle(ctx, m)
	returned = true
	done(judge(m, err), time.Now())
	return err
}

// attempt is the state of one observed attempt that keeps the handler's
// return time itself, so that observing it allocates nothing: callback is a
// func(job.Result) bound once, which calls done with that time.
type attempt interface {
	callback() func(job.Result)
	returned()                          // the chain below returned (or panicked) now
	done(res job.Result, end time.Time) // called once
}

// observeAttempt is observe for an attempt that keeps its own state.
func observeAttempt(ctx context.Context, m *job.Message, next job.Handler, a attempt) error {
	if job.OnResult(ctx, a.callback()) {
		// The worker settles after the chain returned, so the return time
		// is set by then, also when the handler panicked.
		defer a.returned()
		return next.Handle(ctx, m)
	}
	returned := false
	defer func() {
		if !returned {
			a.done(job.Result{Outcome: job.OutcomeUnknown, Err: errPanicked}, time.Now())
		}
	}()
	err := next.Handle(ctx, m)
	returned = true
	a.done(judge(m, err), time.Now())
	return err
}

// judge gives the result a worker would record for err when it can record
// it: success for nil, else retrydecide.Decide's decision without the
// worker's policy (so the delay is that of retry.After, or 0).
func judge(m *job.Message, err error) job.Result {
	if err == nil {
		return job.Result{Outcome: job.OutcomeSuccess}
	}
	if d := retrydecide.Decide(m.Attempt, m.MaxRetries, nil, err); !d.Dead {
		return job.Result{Outcome: job.OutcomeRetry, Err: err, Delay: d.Delay}
	}
	return job.Result{Outcome: job.OutcomeDead, Err: err}
}

// queueOf is the queue an envelope goes to: its own, or the default.
func queueOf(env *job.Envelope) string {
	if env.Queue == "" {
		return naming.DefaultQueue
	}
	return env.Queue
}

// errorsOf returns the error of each envelope of a batch enqueue: the
// aligned entries of a *job.BatchError, or err for every envelope.
func errorsOf(err error, n int) func(i int) error {
	var be *job.BatchError
	if errors.As(err, &be) && len(be.Errs) == n {
		return func(i int) error { return be.Errs[i] }
	}
	return func(int) error { return err }
}
