package deadletter_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// A job that fails permanently is listed with its error, the cause is
// fixed, and the job is redriven.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// In your code: rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}).
	rdb, ns, done := redistest.ForExample("deadletter.Example")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}

	// The SMS job names the user; the handler looks the number up.
	type SMS struct {
		UserID string `json:"user_id"`
	}
	var mu sync.Mutex
	phones := map[string]string{"u-6": "+1555CALLME"}
	sendSMS := job.New[SMS]("sms.send")

	reg := job.NewRegistry()
	sent := make(chan string)
	sendSMS.Handle(reg, func(ctx context.Context, j *job.Job[SMS]) error {
		mu.Lock()
		phone := phones[j.Args.UserID]
		mu.Unlock()
		if phone == "+1555CALLME" {
			return retry.Permanent(fmt.Errorf("invalid phone number %q", phone))
		}
		sent <- phone
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()

	if _, err := sendSMS.Enqueue(ctx, b, SMS{UserID: "u-6"}, job.ID("sms-u-6")); err != nil {
		panic(err)
	}

	// List the dead letters of the queue (waiting for the worker to put
	// the job there).
	dead := deadletter.New(b)
	var page deadletter.Page
	for len(page.Records) == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		page, err = dead.List(ctx, "default", deadletter.ListOptions{Filter: deadletter.Filter{Type: "sms.send"}})
		if err != nil {
			panic(err)
		}
	}
	for _, r := range page.Records {
		fmt.Printf("%s %s, %d attempt(s): %s\n", r.ID, r.Type, r.Attempts, r.Error)
	}

	// Fix the cause, then redrive: the job is scheduled again, attempts
	// reset, and leaves the dead letters.
	mu.Lock()
	phones["u-6"] = "+15550106"
	mu.Unlock()
	if err := dead.Redrive(ctx, "default", 0, "sms-u-6"); err != nil {
		panic(err)
	}
	fmt.Println("sent to", <-sent)

	stop()
	if err := <-stopped; err != nil {
		panic(err)
	}
	page, err = dead.List(ctx, "default", deadletter.ListOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("dead letters left:", len(page.Records))
	// Output:
	// sms-u-6 sms.send, 1 attempt(s): invalid phone number "+1555CALLME"
	// sent to +15550106
	// dead letters left: 0
}
