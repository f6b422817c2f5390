// Command gettingstarted schedules a job two seconds ahead and handles it:
// the first program of docs/getting-started.md.
//
// It uses the Redis server named by REDIS_URL, or an embedded one when
// REDIS_URL is unset, so it also runs on a machine without Redis.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// Greeting is the payload of a job: any value that encodes to JSON.
type Greeting struct {
	Name string `json:"name"`
}

// Greet is a job type: a name bound to the payload's Go type. The code that
// enqueues and the code that handles share this one value.
var Greet = job.New[Greeting]("greet")

var start = time.Now()

// logf prints a line stamped with the time since the program started.
func logf(format string, args ...any) {
	fmt.Printf("[%6.3fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	ctx := context.Background()
	rdb, closeRedis, err := connect()
	if err != nil {
		log.Fatal(err)
	}
	defer closeRedis()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		log.Fatal(err)
	}

	// Consumer: a registry maps job types to handlers; a worker runs them.
	handled := make(chan string)
	reg := job.NewRegistry()
	Greet.Handle(reg, func(ctx context.Context, j *job.Job[Greeting]) error {
		logf("hello, %s! (job %s, attempt %d, started %v after its ready time)", j.Args.Name, j.ID, j.Attempt, j.Lateness())
		select {
		case handled <- j.ID:
			return nil // nil acknowledges the job; an error would retry it
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()

	// Producer: run a greeting in two seconds.
	env, err := Greet.Enqueue(ctx, b, Greeting{Name: "Ada"}, job.In(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	logf("scheduled job %s, ready at %s", env.ID, env.ReadyAt.Format("15:04:05.000"))

	for id := range handled {
		if id == env.ID {
			break
		}
	}

	// Graceful shutdown: Run stops claiming, lets running jobs finish and
	// returns.
	stop()
	if err := <-stopped; err != nil {
		log.Fatal(err)
	}
	logf("worker stopped")
}

// connect returns a client for REDIS_URL, or for an embedded Redis when
// REDIS_URL is unset, and a function that closes it.
func connect() (*redis.Client, func(), error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb := redis.NewClient(opts)
		logf("using Redis at %s", opts.Addr)
		return rdb, func() { rdb.Close() }, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	logf("REDIS_URL is unset: using an embedded Redis at %s", mr.Addr())
	return rdb, func() { rdb.Close(); mr.Close() }, nil
}
