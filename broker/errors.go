package broker

import "errors"

var (
	// ErrDuplicate: a job with that id is still pending (scheduled or
	// processing) in its queue, with another envelope. The stored job is
	// unchanged. (Enqueueing the very envelope that is stored succeeds:
	// that is a call sent again after its reply was lost.)
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
	// made. The error names the job. An Enqueue that fails so can be sent
	// again with the same envelope: it then succeeds whether or not the
	// first call stored the job, and never stores it twice.
	ErrOutcomeUnknown = errors.New("broker: outcome unknown")

	// ErrPayloadTooLarge: the payload is over the broker's cap.
	ErrPayloadTooLarge = errors.New("broker: payload too large")
)
