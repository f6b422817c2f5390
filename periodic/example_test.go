package periodic_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
	"github.com/delayq/delayq/worker"
)

type Ping struct {
	Service string `json:"service"`
}

var pingType = job.New[Ping]("health.ping", job.Queue("health"))

// Two schedulers run the same schedule, as two replicas of a service
// would; a worker handles each second's tick once and records its outcome.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	// In your code: rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}).
	rdb, ns, done := redistest.ForExample("periodic.Example")
	defer done()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		panic(err)
	}

	handled := make(chan string, 16)
	reg := job.NewRegistry()
	pingType.Handle(reg, func(ctx context.Context, j *job.Job[Ping]) error {
		select {
		case handled <- j.Args.Service:
		case <-ctx.Done():
		}
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: "health"}},
		Middleware: []job.Middleware{periodic.Outcomes(b)}})
	if err != nil {
		panic(err)
	}

	running := make(chan error, 3)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	for range 2 {
		s, err := periodic.New(b, periodic.Options{})
		if err != nil {
			panic(err)
		}
		if err := periodic.Add(s, "ping-billing", "@every 1s", pingType, Ping{Service: "billing"}, periodic.Location(berlin)); err != nil {
			panic(err)
		}
		go func() { running <- s.Run(ctx) }()
	}
	go func() { running <- w.Run(ctx) }()

	for range 3 {
		fmt.Println("ping", <-handled)
	}
	stop()
	for range 3 {
		if err := <-running; err != nil {
			panic(err)
		}
	}

	// What `delayq periodic ls` shows.
	var st periodic.Status
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, err := periodic.List(context.Background(), b, time.Time{})
		if err != nil {
			panic(err)
		}
		if st = list[0]; st.Outcome != nil {
			break
		}
	}
	fmt.Println(st.Name, st.Spec, st.Zone, st.Type, st.Queue, "missed:", st.Missed, "within", st.Within)
	fmt.Println("last outcome:", st.Outcome.Result, "stale:", st.Stale)

	// Bad input fails at declaration, naming what is wrong.
	s, _ := periodic.New(b, periodic.Options{})
	err = periodic.Add(s, "nightly", "30 25 * * *", pingType, Ping{})
	fmt.Println(errors.Is(err, job.ErrInvalid), err)
	// An unknown time zone fails where it is loaded.
	_, err = time.LoadLocation("Mars/Olympus_Mons")
	fmt.Println(err)
	// Output:
	// ping billing
	// ping billing
	// ping billing
	// ping-billing @every 1s Europe/Berlin health.ping health missed: once within 1h0m0s
	// last outcome: success stale: false
	// true periodic: invalid: schedule "nightly": cron expression "30 25 * * *": end of range (25) above maximum (23): 25
	// unknown time zone Mars/Olympus_Mons
}
