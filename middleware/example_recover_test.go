package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

// Recover turns a handler's panic into an error that carries the panic value
// and the stack, so the job is retried or dead-lettered like any failure.
func ExampleRecover() {
	h := middleware.Recover()(job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		var rates map[string]float64
		rates["EUR"] = 1 // a bug: assignment to a nil map
		return nil
	}))
	err := h.Handle(context.Background(), &job.Message{Envelope: job.Envelope{Type: "fx.update"}, Attempt: 1})

	var p *middleware.PanicError
	first, _, _ := strings.Cut(err.Error(), "\n")
	fmt.Println(errors.As(err, &p), first)
	// Output: true panic: assignment to entry in nil map
}

// A middleware is a func(job.Handler) job.Handler. This one prints each
// attempt's outcome; job.Chain (or worker.Options.Middleware) applies the
// first middleware outermost, so here Timeout's deadline is set before the
// handler runs and the outcome is printed after it.
func Example_ownMiddleware() {
	printOutcome := func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			err := next.Handle(ctx, m)
			fmt.Printf("%s attempt %d: %v\n", m.Type, m.Attempt, err)
			return err
		})
	}
	handler := job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return nil
	})

	h := job.Chain(handler, middleware.Recover(), printOutcome, middleware.Timeout(5*time.Second))
	_ = h.Handle(context.Background(), &job.Message{Envelope: job.Envelope{Type: "report.build"}, Attempt: 1})
	_ = job.Chain(handler, printOutcome).Handle(context.Background(), &job.Message{Envelope: job.Envelope{Type: "report.build"}, Attempt: 2})
	// Output:
	// report.build attempt 1: <nil>
	// report.build attempt 2: no deadline
}
