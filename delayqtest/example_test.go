package delayqtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// Reminder is the payload of the examples' job type.
type Reminder struct {
	User string `json:"user"`
}

var sendReminder = job.New[Reminder]("reminder.send", job.Queue("reminders"),
	job.MaxRetries(2), job.Retry(retry.Constant(30*time.Second)))

// A handler's outcomes, decided as a worker decides them, without Redis.
func ExampleRun() {
	reg := job.NewRegistry()
	sendReminder.Handle(reg, func(_ context.Context, j *job.Job[Reminder]) error {
		switch j.Args.User {
		case "u-busy":
			return errors.New("provider busy")
		case "u-gone":
			return retry.Permanent(errors.New("user deleted"))
		}
		return nil
	})
	rn := &delayqtest.Runner{Registry: reg}
	for _, user := range []string{"u-1", "u-busy", "u-gone"} {
		res, err := delayqtest.Run(context.Background(), rn, sendReminder, Reminder{User: user})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s %v %q %v\n", user, res.Outcome, res.Delay, res.Reason, res.Err)
	}
	// Output:
	// u-1: success 0s "" <nil>
	// u-busy: retry 30s "retry policy" provider busy
	// u-gone: dead 0s "permanent error" user deleted
}

// RunAll follows the retries, without waiting, until the job ends.
func ExampleRunAll() {
	reg := job.NewRegistry()
	sendReminder.Handle(reg, func(context.Context, *job.Job[Reminder]) error {
		return errors.New("provider busy")
	})
	results, _ := delayqtest.RunAll(context.Background(), &delayqtest.Runner{Registry: reg}, sendReminder, Reminder{User: "u-1"})
	for _, res := range results {
		fmt.Println(res.Message.Attempt, res.Outcome, res.Reason)
	}
	// Output:
	// 1 retry retry policy
	// 2 retry retry policy
	// 3 dead retries exhausted (attempt 3, max retries 2)
}

// The recording enqueuer stands in for the broker in code that enqueues;
// a test then asserts what it enqueued with RequireEnqueuedN.
func ExampleEnqueuer() {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	e := &delayqtest.Enqueuer{Now: func() time.Time { return now }}
	// The code under test:
	_, _ = sendReminder.Enqueue(context.Background(), e, Reminder{User: "u-1"},
		job.ID("remind-u-1"), job.In(24*time.Hour))
	_, err := sendReminder.Enqueue(context.Background(), e, Reminder{User: "u-2"}, job.ID("remind-u-1"))
	fmt.Println("second job with the id:", err)

	for _, j := range e.Jobs() {
		args, _ := delayqtest.Decode(sendReminder, j.Envelope)
		fmt.Println(j.Type, j.ID, j.Queue, j.ReadyAt.Format(time.RFC3339), args.User)
	}
	// Output:
	// second job with the id: broker: a job with that id is already pending: id "remind-u-1" in queue "reminders"
	// reminder.send remind-u-1 reminders 2026-03-02T09:00:00Z u-1
}
