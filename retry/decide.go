package retry

import (
	"fmt"
	"time"
)

// Decision is what becomes of a failed attempt.
type Decision struct {
	// Dead: no attempt follows; the job goes to the dead-letter store.
	Dead bool
	// Delay is how long until the next attempt, when not Dead.
	Delay time.Duration
	// Snooze: the handler asked for the job again after Delay without
	// spending the attempt (Snooze); the worker gives the attempt back,
	// up to MaxSnoozes per job.
	Snooze bool
	// Reason says why, for logs: "permanent error", "retries exhausted
	// (attempt 4, max retries 3)", "retry.Snooze", "retry.After" or
	// "retry policy".
	Reason string
}

// Decide decides a failed attempt: attempt is the attempt that failed (1
// for the first), maxRetries the job's retry budget, p the policy that
// gives the delay before the next attempt (nil gives 0) and err what the
// attempt returned. A permanent error (Permanent) or a spent budget
// (attempt > maxRetries) is dead; otherwise the delay of After wins over
// the policy's. A snooze ([Snooze]) is neither: it does not count against
// the budget (the caller enforces MaxSnoozes). It is the one place this is decided: workers, the
// observing middleware and the test kit all call it.
func Decide(attempt, maxRetries int, p Policy, err error) Decision {
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
