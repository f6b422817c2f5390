package retry

import (
	"fmt"
	"time"
)

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryPermanent marks the error for delayq's own packages
// (internal/retrydecide reads it).
func (e *permanentError) RetryPermanent() {}

// Permanent wraps err so that the job that returned it is dead-lettered at
// once, whatever retries it has left. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// afterError asks for the next attempt after a fixed delay.
type afterError struct {
	delay time.Duration
	err   error
}

func (e *afterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.delay, e.err)
}
func (e *afterError) Unwrap() error { return e.err }

// RetryAfter is the delay, for delayq's own packages
// (internal/retrydecide reads it).
func (e *afterError) RetryAfter() time.Duration { return e.delay }

// After wraps err so that the job's next attempt is scheduled exactly d after
// this one failed, instead of the policy's delay. The attempt still counts
// against the job's retry budget. A negative d is taken as zero. After(d, nil)
// is nil.
func After(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &afterError{delay: max(d, 0), err: err}
}

// snoozeError asks for the job again after a delay, without spending an
// attempt.
type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.delay) }

// RetrySnooze is the delay, for delayq's own packages
// (internal/retrydecide reads it).
func (e *snoozeError) RetrySnooze() time.Duration { return e.delay }

// Snooze is what a handler returns to say "not now, again in d" (a 429
// with Retry-After): the job is scheduled d from now and the attempt is
// given back, so its retry budget is not spent. A job snoozes at most 100
// times; the next snooze is a failed attempt (its error says so), so that
// a job cannot snooze forever. A negative d is taken as zero.
func Snooze(d time.Duration) error { return &snoozeError{delay: max(d, 0)} }
