// Command stallworker is the worker process of the stall suites in
// internal/faulttest: a delayq worker that the test stops with SIGSTOP and
// resumes with SIGCONT while other workers run, and whose handlers record
// when they start and end without slowing down, so that the adaptive
// prefetch grows to its full depth.
//
// It is configured by environment variables:
//
//	STALLWORKER_URL          Redis URL (required)
//	STALLWORKER_NS           broker namespace (required)
//	STALLWORKER_NAME         this worker's name in the records (required)
//	STALLWORKER_DEFAULTS     "1": the default worker.Options (only Broker,
//	                         Registry and Logger set); the settings below
//	                         are then ignored
//	STALLWORKER_CONCURRENCY  handler goroutines (default 4)
//	STALLWORKER_PREFETCH     worker.Options.Prefetch (default 0, adaptive)
//	STALLWORKER_LEASE        lease (default 2s)
//	STALLWORKER_DEBUG        "1": log at debug level (each claim's jobs,
//	                         once they are held), else at info level
//
// Its job type is "stall.job" (Args below) in the default queue. A handler
// appends "start <name> <id> <attempt> <unixnano>" to the list NS:spans as
// it starts and "end <name> <id> <attempt> <unixnano> <cause>" as it
// returns, cause being "-" when it ran to its end, or "stale", "lost",
// "cancel" or "other" for why its context was cancelled
// (worker.ErrLeaseStale, broker.ErrLeaseLost, ...). The records are
// buffered and written by one goroutine, a batch at a time, so a handler
// costs about a microsecond and no round trip; the buffer is flushed when
// the worker stops. A handler of a job with HoldMS waits that long (with
// First, on the job's first attempt only), or until its context is
// cancelled. SIGTERM or SIGINT stop it gracefully.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// Args are the arguments of the stall suites' jobs.
type Args struct {
	N      int  `json:"n"`
	HoldMS int  `json:"hold_ms,omitempty"` // how long the handler runs, unless cancelled
	First  bool `json:"first,omitempty"`   // HoldMS holds the first attempt only; later ones return at once
}

// Stall is the stall suites' job type: retried soon after a failed attempt
// (a lease that ran out), so that a stalled worker's jobs run elsewhere
// while it is stopped.
var Stall = job.New[Args]("stall.job", job.MaxRetries(20), job.Retry(retry.Constant(10*time.Millisecond)))

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "stallworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	url, ns, name := os.Getenv("STALLWORKER_URL"), os.Getenv("STALLWORKER_NS"), os.Getenv("STALLWORKER_NAME")
	if url == "" || ns == "" || name == "" {
		return errors.New("STALLWORKER_URL, STALLWORKER_NS and STALLWORKER_NAME are required")
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

	records := make(chan string, 1<<16)
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		flush(rdb, ns+":spans", records)
	}()
	record := func(what string, j *job.Job[Args], tail string) {
		records <- fmt.Sprintf("%s %s %s %d %d%s", what, name, j.ID, j.Attempt, time.Now().UnixNano(), tail)
	}
	reg := job.NewRegistry()
	Stall.Handle(reg, func(ctx context.Context, j *job.Job[Args]) error {
		record("start", j, "")
		if j.Args.HoldMS > 0 && (!j.Args.First || j.Attempt == 1) {
			t := time.NewTimer(time.Duration(j.Args.HoldMS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				record("end", j, " "+cause(ctx))
				return context.Cause(ctx)
			}
		}
		record("end", j, " -")
		return nil
	})

	level := zerolog.InfoLevel
	if os.Getenv("STALLWORKER_DEBUG") == "1" {
		level = zerolog.DebugLevel
	}
	logger := zerolog.New(os.Stderr).Level(level).With().Timestamp().Str("worker", name).Logger()
	cfg := worker.Options{Broker: b, Registry: reg, Logger: &logger}
	if os.Getenv("STALLWORKER_DEFAULTS") != "1" {
		if cfg.Concurrency, err = intEnv("STALLWORKER_CONCURRENCY", 4); err != nil {
			return err
		}
		if cfg.Prefetch, err = intEnv("STALLWORKER_PREFETCH", 0); err != nil {
			return err
		}
		cfg.Lease = 2 * time.Second
		if v := os.Getenv("STALLWORKER_LEASE"); v != "" {
			if cfg.Lease, err = time.ParseDuration(v); err != nil {
				return fmt.Errorf("STALLWORKER_LEASE=%q: %w", v, err)
			}
		}
		cfg.MaxIdle = 500 * time.Millisecond
		cfg.ShutdownTimeout = 2 * time.Second
	}
	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	err = w.Run(ctx)
	close(records)
	<-flushed
	return err
}

// cause names why ctx was cancelled.
func cause(ctx context.Context) string {
	switch c := context.Cause(ctx); {
	case errors.Is(c, worker.ErrLeaseStale):
		return "stale"
	case errors.Is(c, broker.ErrLeaseLost):
		return "lost"
	case errors.Is(c, broker.ErrCancelled):
		return "cancel"
	default:
		return "other"
	}
}

// flush writes the records to the list key, up to 1,000 per RPUSH, until
// records is closed and drained.
func flush(rdb *redis.Client, key string, records <-chan string) {
	batch := make([]any, 0, 1000)
	for rec := range records {
		batch = append(batch[:0], rec)
	more:
		for len(batch) < cap(batch) {
			select {
			case r, ok := <-records:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		for {
			err := rdb.RPush(context.Background(), key, batch...).Err()
			if err == nil {
				break
			}
			fmt.Fprintln(os.Stderr, "stallworker: recording:", err)
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func intEnv(key string, def int) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want an integer", key, v)
	}
	return n, nil
}
