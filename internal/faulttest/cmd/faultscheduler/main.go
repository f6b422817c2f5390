// Command faultscheduler is a scheduler process of the periodic suites in
// internal/faulttest: a periodic.Scheduler with every-second schedules
// enqueueing jobs of type fault.tick, by default one schedule, "tick", to
// the queue "ticks".
//
// It is configured by environment variables:
//
//	FAULTSCHED_URL        Redis URL (required)
//	FAULTSCHED_NS         broker namespace (required)
//	FAULTSCHED_NAME       this scheduler's name in its log lines (required)
//	FAULTSCHED_QUEUE      the queue of the schedules' jobs (default "ticks")
//	FAULTSCHED_SCHEDULES  the schedules' names, separated by commas (default "tick")
//	FAULTSCHED_EXPIRE     name=<RFC 3339 time>: the jobs of that schedule
//	                      expire then (job.ExpireAt), so that its ticks
//	                      after it cannot be enqueued
//
// It prints "faultscheduler started" once it handles signals; SIGTERM or
// SIGINT stop it. Log lines (warn and error, JSON) and errors go to
// stderr.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
)

// Tick is the argument of the suite's jobs.
type Tick struct {
	Schedule string `json:"schedule"`
}

// TickType is the suite's job type.
var TickType = job.New[Tick]("fault.tick", job.Queue("ticks"))

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "faultscheduler:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	url, ns, name := os.Getenv("FAULTSCHED_URL"), os.Getenv("FAULTSCHED_NS"), os.Getenv("FAULTSCHED_NAME")
	if url == "" || ns == "" || name == "" {
		return errors.New("FAULTSCHED_URL, FAULTSCHED_NS and FAULTSCHED_NAME are required")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		return err
	}
	logger := zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Str("scheduler", name).Logger()
	s, err := periodic.New(b, periodic.Options{Logger: &logger})
	if err != nil {
		return err
	}
	queue := cmp.Or(os.Getenv("FAULTSCHED_QUEUE"), "ticks")
	expiring, expireAt := "", time.Time{}
	if v := os.Getenv("FAULTSCHED_EXPIRE"); v != "" {
		name, at, ok := strings.Cut(v, "=")
		if expireAt, err = time.Parse(time.RFC3339Nano, at); !ok || err != nil {
			return fmt.Errorf("FAULTSCHED_EXPIRE %q is not name=<RFC 3339 time>", v)
		}
		expiring = name
	}
	for _, name := range strings.Split(cmp.Or(os.Getenv("FAULTSCHED_SCHEDULES"), "tick"), ",") {
		opts := []job.Option{job.Queue(queue)}
		if name == expiring {
			opts = append(opts, job.ExpireAt(expireAt))
		}
		if err := periodic.Add(s, name, "@every 1s", TickType, Tick{Schedule: name}, periodic.JobOptions(opts...)); err != nil {
			return err
		}
	}
	fmt.Println("faultscheduler started") // the test signals only after this line
	return s.Run(ctx)
}
