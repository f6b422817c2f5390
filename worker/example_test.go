package worker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// A complete round trip: a job is enqueued to run in 100ms, a worker
// handles it, and Run returns once its context is cancelled.
func Example() {
	ctx := context.Background()
	// In your code: rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}).
	rdb, ns, done := redistest.ForExample("worker.Example")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}

	type Welcome struct {
		Email string `json:"email"`
	}
	sendWelcome := job.New[Welcome]("user.welcome")

	// Consumer side.
	reg := job.NewRegistry()
	handled := make(chan struct{})
	sendWelcome.Handle(reg, func(ctx context.Context, j *job.Job[Welcome]) error {
		fmt.Printf("welcome %s (attempt %d, not early: %v)\n", j.Args.Email, j.Attempt, j.Lateness() >= 0)
		close(handled)
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Concurrency: 4})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()

	// Producer side.
	if _, err := sendWelcome.Enqueue(ctx, b, Welcome{Email: "ada@example.com"}, job.In(100*time.Millisecond)); err != nil {
		panic(err)
	}

	<-handled
	stop() // graceful: running handlers finish, acks are flushed
	fmt.Println("Run returned:", <-stopped)

	st, err := testkit.OneStats(b.Stats(ctx, "default"))
	if err != nil {
		panic(err)
	}
	fmt.Println("left in the queue:", st.Scheduled+st.Processing)
	// Output:
	// welcome ada@example.com (attempt 1, not early: true)
	// Run returned: <nil>
	// left in the queue: 0
}

// A handler's error retries the job after the backoff; retry.Permanent
// dead-letters it at once.
func Example_retry() {
	ctx := context.Background()
	rdb, ns, done := redistest.ForExample("worker.Example_retry")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}

	type Charge struct {
		Card string `json:"card"`
	}
	charge := job.New[Charge]("payment.charge",
		job.MaxRetries(3),
		job.Retry(retry.Exponential{Initial: 50 * time.Millisecond, Multiplier: 2, Max: time.Second}),
	)

	reg := job.NewRegistry()
	finished := make(chan struct{}, 2)
	charge.Handle(reg, func(ctx context.Context, j *job.Job[Charge]) error {
		switch {
		case j.Args.Card == "expired":
			fmt.Println("expired card: permanent")
			finished <- struct{}{}
			return retry.Permanent(errors.New("card expired"))
		case j.Attempt == 1:
			fmt.Println("attempt 1: gateway timeout")
			return errors.New("gateway timeout")
		default:
			fmt.Printf("attempt %d: charged (last error: %s)\n", j.Attempt, j.LastError)
			finished <- struct{}{}
			return nil
		}
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Concurrency: 1})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()

	if _, err := charge.Enqueue(ctx, b, Charge{Card: "4242"}); err != nil {
		panic(err)
	}
	<-finished
	if _, err := charge.Enqueue(ctx, b, Charge{Card: "expired"}, job.ID("charge-expired")); err != nil {
		panic(err)
	}
	<-finished
	stop()
	if err := <-stopped; err != nil {
		panic(err)
	}

	rec, err := deadletter.New(b).Get(ctx, "default", "charge-expired")
	if err != nil {
		panic(err)
	}
	fmt.Printf("dead letter: %s after %d attempt(s): %s\n", rec.ID, rec.Attempts, rec.Error)
	// Output:
	// attempt 1: gateway timeout
	// attempt 2: charged (last error: gateway timeout)
	// expired card: permanent
	// dead letter: charge-expired after 1 attempt(s): card expired
}
