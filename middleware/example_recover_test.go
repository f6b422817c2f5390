package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

// The worker turns a handler's panic into a *PanicError that carries the
// panic value and the stack, so the job is retried or dead-lettered like
// any failure. delayqtest.Runner runs an attempt as the worker does.
func ExamplePanicError() {
	reg := job.NewRegistry()
	update := job.New[struct{}]("fx.update")
	update.Handle(reg, func(ctx context.Context, j *job.Job[struct{}]) error {
		var rates map[string]float64
		rates["EUR"] = 1 // a bug: assignment to a nil map
		return nil
	})
	res, err := delayqtest.Run(context.Background(), &delayqtest.Runner{Registry: reg}, update, struct{}{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var p *middleware.PanicError
	first, _, _ := strings.Cut(res.Err.Error(), "\n")
	fmt.Println(res.Outcome, errors.As(res.Err, &p), first)
	// Output: retry true panic: assignment to entry in nil map
}

// A middleware is a func(job.Handler) job.Handler. This one prints each
// attempt's outcome. worker.Options.Middleware (and delayqtest.Runner.Middleware) apply the
// first middleware outermost, and the worker puts the attempt's deadline
// and panic recovery inside the whole chain, so a middleware sees a
// timeout or a panic as the attempt's error.
func Example_ownMiddleware() {
	printOutcome := func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			err := next.Handle(ctx, m)
			fmt.Printf("%s attempt %d: %v\n", m.Type, m.Attempt, err)
			return err
		})
	}
	reg := job.NewRegistry()
	build := job.New[struct{}]("report.build")
	build.Handle(reg, func(ctx context.Context, j *job.Job[struct{}]) error {
		if j.Attempt == 1 {
			return errors.New("source not ready")
		}
		return nil
	})
	r := &delayqtest.Runner{Registry: reg, Middleware: []job.Middleware{printOutcome}}
	if _, err := delayqtest.RunAll(context.Background(), r, build, struct{}{}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// report.build attempt 1: source not ready
	// report.build attempt 2: <nil>
}
