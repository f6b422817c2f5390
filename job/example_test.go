package job_test

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/job"
)

// A job type is defined once and shared by the code that enqueues and the
// code that handles, so the name and the payload type cannot drift apart.
func ExampleNew() {
	type Reminder struct {
		UserID int `json:"user_id"`
	}
	remind := job.New[Reminder]("user.remind", job.MaxRetries(3), job.Queue("emails"))

	env, err := remind.Envelope(Reminder{UserID: 7}, job.In(30*time.Minute), job.ID("remind-7"))
	if err != nil {
		panic(err)
	}
	fmt.Println(env.Type, env.Queue, env.ID, env.Delay, string(env.Payload), env.MaxRetries)

	reg := job.NewRegistry()
	remind.Handle(reg, func(ctx context.Context, j *job.Job[Reminder]) error {
		fmt.Println("remind user", j.Args.UserID, "attempt", j.Attempt)
		return nil
	})
	// A test runs the handler as a worker would.
	_, _ = (&delayqtest.Runner{Registry: reg}).Attempt(context.Background(), env, 1)
	// Output:
	// user.remind emails remind-7 30m0s {"user_id":7} 3
	// remind user 7 attempt 1
}
