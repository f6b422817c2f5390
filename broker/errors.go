package broker

import "errors"

var (
	// ErrDuplicate: a job with that id is still pending (scheduled or
	// processing) in its queue. The stored job is unchanged.
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

	// ErrPayloadTooLarge: the payload is over the broker's cap.
	ErrPayloadTooLarge = errors.New("broker: payload too large")
)
