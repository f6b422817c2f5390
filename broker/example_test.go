package broker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// An order's payment timeout is scheduled with the order id as the job id,
// so it is scheduled once, and cancelled when the order is paid.
func ExampleBroker_Cancel() {
	ctx := context.Background()
	// In your code: rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}).
	rdb, ns, done := redistest.ForExample("ExampleBroker_Cancel")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}

	type Order struct {
		ID string `json:"id"`
	}
	cancelUnpaid := job.New[Order]("order.cancel_unpaid")

	env, err := cancelUnpaid.Enqueue(ctx, b, Order{ID: "1001"}, job.ID("order-1001"), job.In(30*time.Minute))
	if err != nil {
		panic(err)
	}
	fmt.Println("scheduled", env.ID, "in queue", env.Queue, "ready in", time.Until(env.ReadyAt).Round(time.Minute))

	_, err = cancelUnpaid.Enqueue(ctx, b, Order{ID: "1001"}, job.ID("order-1001"), job.In(30*time.Minute))
	fmt.Println("again:", errors.Is(err, broker.ErrDuplicate))

	st, err := testkit.OneStats(b.Stats(ctx, "default"))
	if err != nil {
		panic(err)
	}
	fmt.Println("scheduled jobs:", st.Scheduled, "due now:", st.Due)

	// The order is paid.
	c, err := b.Cancel(ctx, "default", "order-1001")
	fmt.Println("cancel:", err, "was running:", c.Running)
	_, err = b.Cancel(ctx, "default", "order-1001")
	fmt.Println("cancel again:", errors.Is(err, broker.ErrNotFound))
	// Output:
	// scheduled order-1001 in queue default ready in 30m0s
	// again: true
	// scheduled jobs: 1 due now: 0
	// cancel: <nil> was running: false
	// cancel again: true
}

// Reschedule moves a job that has not started yet.
func ExampleBroker_Reschedule() {
	ctx := context.Background()
	rdb, ns, done := redistest.ForExample("ExampleBroker_Reschedule")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}

	type Reminder struct {
		UserID int `json:"user_id"`
	}
	remind := job.New[Reminder]("appointment.remind", job.Queue("reminders"))
	appointment := time.Now().Add(48 * time.Hour)
	if _, err := remind.Enqueue(ctx, b, Reminder{UserID: 7}, job.ID("remind-7"), job.At(appointment.Add(-24*time.Hour))); err != nil {
		panic(err)
	}

	// The appointment moves by a week.
	appointment = appointment.Add(7 * 24 * time.Hour)
	ready, err := b.Reschedule(ctx, "reminders", "remind-7", appointment.Add(-24*time.Hour))
	if err != nil {
		panic(err)
	}
	fmt.Println("now ready in", time.Until(ready).Round(time.Hour))

	_, err = b.Reschedule(ctx, "reminders", "remind-8", appointment)
	fmt.Println("unknown job:", errors.Is(err, broker.ErrNotFound))
	// Output:
	// now ready in 192h0m0s
	// unknown job: true
}

// A reminder that must go out once per user and day: job.Unique derives
// the id from the arguments, so a second enqueue is refused, naming the job
// that is pending (and, after it ran, for the rest of the window).
func ExampleDuplicateError() {
	ctx := context.Background()
	rdb, ns, done := redistest.ForExample("ExampleDuplicateError")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}
	type Reminder struct {
		User string `json:"user"`
		Day  string `json:"day"`
	}
	remind := job.New[Reminder]("reminder.send", job.Unique(24*time.Hour))

	first, err := remind.Enqueue(ctx, b, Reminder{User: "ann", Day: "2026-12-03"}, job.In(time.Hour))
	if err != nil {
		panic(err)
	}
	// Another producer asks for the same reminder (its header is not part
	// of the id).
	_, err = remind.Enqueue(ctx, b, Reminder{User: "ann", Day: "2026-12-03"}, job.In(2*time.Hour), job.Header("source", "signup"))
	var dup *broker.DuplicateError
	fmt.Println("refused:", errors.As(err, &dup), "same job:", dup.ID == first.ID)
	_, err = remind.Enqueue(ctx, b, Reminder{User: "bob", Day: "2026-12-03"}, job.In(time.Hour))
	fmt.Println("another user:", err)
	// Output:
	// refused: true same job: true
	// another user: <nil>
}

// An order's payment window is extended: job.Replace gives the scheduled
// timeout a new ready time (and arguments) in one step.
func ExampleBroker_Enqueue_replace() {
	ctx := context.Background()
	rdb, ns, done := redistest.ForExample("ExampleBroker_Enqueue_replace")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}
	type Order struct {
		ID string `json:"id"`
	}
	timeout := job.New[Order]("order.timeout", job.Queue("orders"))
	if _, err := timeout.Enqueue(ctx, b, Order{ID: "42"}, job.ID("order-42"), job.In(15*time.Minute)); err != nil {
		panic(err)
	}
	env, err := timeout.Enqueue(ctx, b, Order{ID: "42"}, job.ID("order-42"), job.In(time.Hour), job.Replace())
	if err != nil {
		panic(err)
	}
	fmt.Println("now ready in", time.Until(env.ReadyAt).Round(time.Minute))
	st, _ := testkit.OneStats(b.Stats(ctx, "orders"))
	fmt.Println("scheduled jobs:", st.Scheduled)
	// A one-time password that is useless after five minutes never runs
	// later than that, across retries too.
	otp := job.New[Order]("otp.send", job.Queue("orders"), job.ExpireIn(5*time.Minute))
	env, err = otp.Enqueue(ctx, b, Order{ID: "42"})
	fmt.Println("expires in", time.Until(env.ExpireAt).Round(time.Minute), err)
	// Output:
	// now ready in 1h0m0s
	// scheduled jobs: 1
	// expires in 5m0s <nil>
}

// A bulk load with an id and a ready time per job, and the typed helpers
// that find the jobs again in the type's queue.
func ExampleBroker_Enqueue_items() {
	ctx := context.Background()
	rdb, ns, done := redistest.ForExample("ExampleBroker_Enqueue_items")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}
	type Reminder struct {
		User string `json:"user"`
	}
	remind := job.New[Reminder]("reminder.send", job.Queue("reminders"))
	start := time.Now().Add(time.Hour)
	envs, err := remind.EnqueueItems(ctx, b, []job.Item[Reminder]{
		{Args: Reminder{"ann"}, Opts: []job.Option{job.ID("remind-ann"), job.At(start)}},
		{Args: Reminder{"bob"}, Opts: []job.Option{job.ID("remind-bob"), job.At(start.Add(time.Hour))}},
	})
	fmt.Println(len(envs), "stored:", err)

	info, err := remind.Lookup(ctx, b, "remind-bob")
	fmt.Println(info.Queue, info.State, time.Until(info.ReadyAt).Round(time.Hour), err)
	_, err = remind.Cancel(ctx, b, "remind-ann")
	fmt.Println("cancelled:", err)
	_, err = remind.Cancel(ctx, b, "remind-ann")
	fmt.Println("again:", errors.Is(err, broker.ErrNotFound))
	// Output:
	// 2 stored: <nil>
	// reminders scheduled 2h0m0s <nil>
	// cancelled: <nil>
	// again: true
}
