package middleware

import (
	"fmt"
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
