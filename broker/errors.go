package broker

import (
	"errors"

	"github.com/delayq/delayq/internal/rules"
)

var (
	// ErrDuplicate: another call stored a job with that id, which is still
	// pending (scheduled or processing) in its queue, or is remembered
	// after its end (job.Unique). The stored job is unchanged. Only the
	// call that stored a job gets nil for it, however alike the envelopes
	// and whatever the timing; that call sent again (Resend) gets nil
	// again.
	ErrDuplicate = rules.ErrDuplicate

	// ErrNotFound: no such job in the state the operation needs.
	ErrNotFound = rules.ErrNotFound

	// ErrInProgress: the job is being handled by a worker, so it can no
	// longer be cancelled or rescheduled.
	ErrInProgress = rules.ErrInProgress

	// ErrLeaseLost: the caller's lease on the job ran out and the job was
	// taken back (or finished by another worker). Nothing was changed.
	ErrLeaseLost = errors.New("broker: lease lost")

	// ErrOutcomeUnknown: the reply to a call was lost (a dropped
	// connection, a timeout), so the change may or may not have been
	// made. The error is a *CallError naming the call and the job; Resend
	// sends the very call again and returns its first outcome (within
	// Options.ResendWindow), so a job is never stored, cancelled or
	// redriven twice, even if it ran and ended meanwhile.
	ErrOutcomeUnknown = errors.New("broker: outcome unknown")

	// ErrCancelled is the cause of a running handler's context when its job
	// was cancelled (Broker.Cancel): context.Cause(ctx) wraps it. The job
	// ends in the dead letters with Reason ReasonCancelled, not retried.
	ErrCancelled = errors.New("broker: job cancelled")

	// ErrPayloadTooLarge: the payload is over the broker's cap.
	ErrPayloadTooLarge = rules.ErrPayloadTooLarge
)

// DuplicateError is the error of an enqueue refused because a job with
// the id is pending in the queue, or is remembered there after it ended
// (job.Unique). It names the existing job (Queue, ID; Ended when it is
// remembered, not pending); errors.Is(err, ErrDuplicate) holds. (It is
// declared with the rules the test kit shares.)
type DuplicateError = rules.DuplicateError
