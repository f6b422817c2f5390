// Command periodic shows periodic jobs: two replicas of a service run the
// same schedules with no leader, and each second's tick is handled once;
// then the schedules as `delayq periodic ls` shows them, and a bad
// declaration refused.
//
//	go run ./examples/periodic                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/periodic
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
	"github.com/delayq/delayq/worker"
)

// Job types: shared by the schedules and the handlers.
type (
	Ping   struct{ Service string }
	Report struct{ Kind string }
)

var (
	HealthPing  = job.New[Ping]("health.ping", job.Queue("periodic"))
	BuildReport = job.New[Report]("report.build", job.Queue("periodic"))
)

// ticks is how many ticks the example waits for.
const ticks = 3

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "periodic:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rdb, where, closeRedis, err := demo.Redis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()
	b, err := broker.New(rdb, broker.Options{Namespace: "periodic-" + job.NewID()})
	if err != nil {
		return err
	}
	clock := demo.NewClock()
	clock.Printf("using %s", where)

	// The worker: handlers, and periodic.Outcomes to record each tick's outcome.
	reg := job.NewRegistry()
	seen := make(chan string, 64)
	HealthPing.Handle(reg, func(ctx context.Context, j *job.Job[Ping]) error {
		clock.Printf("health.ping %s: job %s (lateness %dms)", j.Args.Service, j.ID, j.Lateness().Milliseconds())
		select {
		case seen <- j.ID:
		case <-ctx.Done():
		}
		return nil
	})
	BuildReport.Handle(reg, func(ctx context.Context, j *job.Job[Report]) error {
		clock.Printf("report.build %s: job %s", j.Args.Kind, j.ID)
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Middleware: []job.Middleware{periodic.Outcomes(b)}})
	if err != nil {
		return err
	}

	// Two replicas of the service declare the same schedules.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, replica := range []string{"replica-a", "replica-b"} {
		s, err := periodic.New(b, periodic.Options{})
		if err != nil {
			stop()
			return err
		}
		if err := periodic.Add(s, "ping-billing", "@every 1s", HealthPing, Ping{Service: "billing"}); err != nil {
			stop()
			return err
		}
		if err := periodic.Add(s, "nightly-sales", "30 2 * * *", BuildReport, Report{Kind: "sales"},
			periodic.Location(berlin), periodic.RunMissedOnce(6*time.Hour)); err != nil {
			stop()
			return err
		}
		clock.Printf("%s: scheduler started (ping-billing every second, nightly-sales at 02:30 Berlin time)", replica)
		wg.Go(func() { _ = s.Run(runCtx) })
	}
	wg.Go(func() { _ = w.Run(runCtx) })

	handled := map[string]int{}
	for len(handled) < ticks {
		select {
		case id := <-seen:
			handled[id]++
		case <-ctx.Done():
			stop()
			wg.Wait()
			return fmt.Errorf("only %d ticks handled in time", len(handled))
		}
	}
	stop()
	wg.Wait()
	for id, n := range handled {
		if n != 1 {
			return fmt.Errorf("tick %s handled %d times", id, n)
		}
	}
	clock.Printf("%d ticks, each handled once, though two schedulers enqueued every one", len(handled))

	// What `delayq periodic ls` shows (the outcome is written just after the ack).
	var list []periodic.Status
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if list, err = periodic.List(ctx, b, time.Time{}); err != nil {
			return err
		}
		if len(list) == 2 && list[1].Outcome != nil || time.Now().After(deadline) {
			break
		}
	}
	for _, st := range list {
		outcome := "-"
		if st.Outcome != nil {
			outcome = st.Outcome.Result
		}
		last := "-"
		if st.LastID != "" {
			last = st.LastID
		}
		clock.Printf("schedule %-13s %-12q zone %-13s missed: %-4s next %s  last %s  outcome %s",
			st.Name, st.Spec, st.Zone, st.Missed, st.Next.Format(time.RFC3339), last, outcome)
	}

	// Bad input fails early, naming what is wrong: an unknown zone where it
	// is loaded, a bad expression at declaration (nothing is written).
	s, _ := periodic.New(b, periodic.Options{})
	_, err = time.LoadLocation("Europe/Berlinn")
	clock.Printf("loading a zone that does not exist: %v", err)
	err = periodic.Add(s, "every-minute", "61 * * * *", BuildReport, Report{})
	clock.Printf("declaring a bad expression: %v", err)
	clock.Printf("done")
	return nil
}
