// Package retrydecide decides what becomes of a failed attempt: retried
// after how long, snoozed, or dead, and why. It is the one place this is
// decided: workers, the observing middleware and the test kit all call
// [Decide]. It reads the errors package retry makes ([retry.Permanent],
// [retry.After], [retry.Snooze]) through methods of their unexported
// types.
package retrydecide

import (
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/retry"
)

// MaxSnoozes is how many times one job may snooze (retry.Snooze). A
// snooze beyond it counts as a failed attempt (its error says so), so that
// a job cannot snooze forever. retry.Snooze's doc states the number.
const MaxSnoozes = 100

// Decision is what becomes of a failed attempt.
type Decision struct {
	// Dead: no attempt follows; the job goes to the dead-letter store.
	Dead bool
	// Delay is how long until the next attempt, when not Dead.
	Delay time.Duration
	// Snooze: the handler asked for the job again after Delay without
	// spending the attempt (retry.Snooze); the worker gives the attempt
	// back, up to MaxSnoozes per job.
	Snooze bool
	// Reason says why, for logs: "permanent error", "retries exhausted
	// (attempt 4, max retries 3)", "retry.Snooze", "retry.After" or
	// "retry policy".
	Reason string
}

// Decide decides a failed attempt: attempt is the attempt that failed (1
// for the first), maxRetries the job's retry budget, p the policy that
// gives the delay before the next attempt (nil gives 0) and err what the
// attempt returned. A permanent error (retry.Permanent) or a spent budget
// (attempt > maxRetries) is dead; otherwise the delay of retry.After wins
// over the policy's. A snooze (retry.Snooze) is neither: it does not count
// against the budget (the caller enforces MaxSnoozes).
func Decide(attempt, maxRetries int, p retry.Policy, err error) Decision {
	if d, ok := SnoozeDelay(err); ok && !IsPermanent(err) {
		return Decision{Snooze: true, Delay: d, Reason: "retry.Snooze"}
	}
	switch {
	case IsPermanent(err):
		return Decision{Dead: true, Reason: "permanent error"}
	case attempt > maxRetries:
		return Decision{Dead: true, Reason: fmt.Sprintf("retries exhausted (attempt %d, max retries %d)", attempt, maxRetries)}
	}
	if d, ok := AfterDelay(err); ok {
		return Decision{Delay: d, Reason: "retry.After"}
	}
	if p == nil {
		return Decision{Reason: "retry policy"}
	}
	return Decision{Delay: p.Delay(attempt), Reason: "retry policy"}
}

// IsPermanent reports whether err, or an error it wraps, was made by
// retry.Permanent.
func IsPermanent(err error) bool {
	var p interface{ RetryPermanent() }
	return errors.As(err, &p)
}

// AfterDelay reports the delay requested by retry.After in err's chain, if
// any.
func AfterDelay(err error) (time.Duration, bool) {
	var a interface{ RetryAfter() time.Duration }
	if errors.As(err, &a) {
		return a.RetryAfter(), true
	}
	return 0, false
}

// SnoozeDelay reports the delay requested by retry.Snooze in err's chain,
// if any.
func SnoozeDelay(err error) (time.Duration, bool) {
	var s interface{ RetrySnooze() time.Duration }
	if errors.As(err, &s) {
		return s.RetrySnooze(), true
	}
	return 0, false
}
