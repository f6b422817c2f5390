package broker

import (
	"errors"
	"fmt"
)

var (
	// ErrDuplicate: another call stored a job with that id, which is still
	// pending (scheduled or processing) in its queue, or is remembered
	// after its end (job.Unique). The stored job is unchanged. Only the
	// call that stored a job gets nil for it, however alike the envelopes
	// and whatever the timing; that call sent again (Resend) gets nil
	// again.
	ErrDuplicate = errors.New("broker: a job with that id is already pending")

	// ErrNotFound: no such job in the state the operation needs.
	ErrNotFound = errors.New("broker: job not found")

	// ErrInProgress: the job is being handled by a worker, so it can no
	// longer be cancelled or rescheduled.
	ErrInProgress = errors.New("broker: job is in progress")

	// ErrLeaseLost: the caller's lease on the job ran out and the job was
	// taken back (or finished by another worker). Nothing was changed.
	ErrLeaseLost = errors.New("broker: lease lost")

	// ErrLeaseLive: the reaper found that a lease it read as expired was
	// extended since; the job stays with its worker.
	ErrLeaseLive = errors.New("broker: lease is live")

	// ErrOutcomeUnknown: the reply to a call was lost (a dropped
	// connection, a timeout), so the change may or may not have been
	// made. The error is a *CallError naming the call and the job; Resend
	// sends the very call again and returns its first outcome (within
	// Options.ResendWindow), so a job is never stored, cancelled or
	// redriven twice, even if it ran and ended meanwhile.
	ErrOutcomeUnknown = errors.New("broker: outcome unknown")

	// ErrCanceled is the cause of a running handler's context when its job
	// was cancelled (Broker.CancelJob): context.Cause(ctx) wraps it. The job
	// ends in the dead letters with Reason ReasonCancelled, not retried.
	ErrCanceled = errors.New("broker: job cancelled")

	// ErrPayloadTooLarge: the payload is over the broker's cap.
	ErrPayloadTooLarge = errors.New("broker: payload too large")
)

// DuplicateError is the error of an enqueue refused because a job with
// the id is pending in the queue, or is remembered there after it ended
// (job.Unique). It names the existing job; errors.Is(err, ErrDuplicate)
// holds.
type DuplicateError struct {
	Queue string // the user's queue
	ID    string // the id of the job that is pending or remembered
	Ended bool   // the job ended and is remembered (job.Unique), not pending
}

func (e *DuplicateError) Error() string {
	if e.Ended {
		return fmt.Sprintf("%v: id %q in queue %q (it ended and is remembered for its uniqueness window)", ErrDuplicate, e.ID, e.Queue)
	}
	return fmt.Sprintf("%v: id %q in queue %q", ErrDuplicate, e.ID, e.Queue)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }
