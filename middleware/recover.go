package middleware

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/delayq/delayq/job"
)

// PanicError is a handler panic turned into an error. Its message carries
// the panic value and the goroutine's stack, so the stack lands in the
// job's last error and dead record.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Recover turns a panic in the handler into a *PanicError. The job is then
// retried or dead-lettered like any failure.
func Recover() job.Middleware {
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next.Handle(ctx, m)
		})
	}
}
