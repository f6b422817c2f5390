// Command faultscheduler is a scheduler process of the periodic suite in
// internal/faulttest: a periodic.Scheduler with one schedule, "tick", every
// second, enqueueing jobs of type fault.tick to the queue "ticks".
//
// It is configured by environment variables:
//
//	FAULTSCHED_URL   Redis URL (required)
//	FAULTSCHED_NS    broker namespace (required)
//	FAULTSCHED_NAME  this scheduler's name in its log lines (required)
//
// It prints "faultscheduler started" once it handles signals; SIGTERM or
// SIGINT stop it. Errors go to stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

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
	s, err := periodic.New(b, periodic.Config{Logger: &logger})
	if err != nil {
		return err
	}
	if err := periodic.Add(s, "tick", "@every 1s", TickType, Tick{Schedule: "tick"}); err != nil {
		return err
	}
	fmt.Println("faultscheduler started") // the test signals only after this line
	return s.Run(ctx)
}
