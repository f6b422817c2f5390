package middleware

import (
	"errors"
)

// ErrTimeout is the cause of a handler context cancelled at its
// deadline: the job's Timeout, its type's, or the worker's default
// (worker.Options.Timeout). The worker gives every attempt that deadline.
var ErrTimeout = errors.New("job: handler deadline exceeded")
