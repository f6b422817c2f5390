// Command faultworker is the worker process of the crash suite in
// internal/faulttest: a delayq worker whose handler fails and sleeps at
// random and records every handling in Redis, so the test can tell what ran
// where after killing it with SIGKILL.
//
// It is configured by environment variables:
//
//	FAULTWORKER_URL      Redis URL (required); redis+cluster://host:port,host:port,...
//	                     for a Redis Cluster, every node a seed
//	FAULTWORKER_NS       broker namespace (required)
//	FAULTWORKER_NAME     this worker's name in the records (required)
//	FAULTWORKER_FAIL     probability that a handling fails and is retried (default 0.1)
//	FAULTWORKER_DELAY    longest random handler delay (default 5ms)
//	FAULTWORKER_LEASE    lease (default 2s)
//	FAULTWORKER_CONCURRENCY  handler slots (default 16)
//	FAULTWORKER_SPANS    "1": also record when each handler starts and ends
//	FAULTWORKER_CHAINED  "1": also handle fault.chained jobs in queue "chained"
//
// Each handling appends "id name attempt outcome" to the list NS:log before
// the handler returns, outcome being ok, fail or poison. With
// FAULTWORKER_SPANS, a handler appends "start name id attempt unixnano" to
// NS:spans as it starts and "end name id attempt unixnano" before it
// returns. SIGTERM or SIGINT stop it gracefully.
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// Args are the arguments of the crash suite's jobs.
type Args struct {
	N      int  `json:"n"`
	Poison bool `json:"poison,omitempty"` // fails permanently: dead-lettered on its first handling
}

// Fault is the crash suite's job type.
var Fault = job.New[Args]("fault.crash", job.MaxRetries(6), job.Retry(retry.Constant(20*time.Millisecond)))

// Chained is the type of the chain suite's next jobs in queue "chained",
// handled as Fault is, with FAULTWORKER_CHAINED=1.
var Chained = job.New[Args]("fault.chained", job.Queue("chained"), job.MaxRetries(6), job.Retry(retry.Constant(20*time.Millisecond)))

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "faultworker:", err)
		os.Exit(1)
	}
}

func run() error {
	// First of all, so that a SIGTERM sent right after the start still
	// means a graceful shutdown.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	url, ns, name := os.Getenv("FAULTWORKER_URL"), os.Getenv("FAULTWORKER_NS"), os.Getenv("FAULTWORKER_NAME")
	if url == "" || ns == "" || name == "" {
		return errors.New("FAULTWORKER_URL, FAULTWORKER_NS and FAULTWORKER_NAME are required")
	}
	failP, err := floatEnv("FAULTWORKER_FAIL", 0.1)
	if err != nil {
		return err
	}
	maxDelay, err := durationEnv("FAULTWORKER_DELAY", 5*time.Millisecond)
	if err != nil {
		return err
	}
	lease, err := durationEnv("FAULTWORKER_LEASE", 2*time.Second)
	if err != nil {
		return err
	}
	concurrency := 16
	if v := os.Getenv("FAULTWORKER_CONCURRENCY"); v != "" {
		if concurrency, err = strconv.Atoi(v); err != nil || concurrency < 1 {
			return fmt.Errorf("FAULTWORKER_CONCURRENCY=%q: want a positive integer", v)
		}
	}
	spans := os.Getenv("FAULTWORKER_SPANS") == "1"
	rdb, err := client(url)
	if err != nil {
		return err
	}
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		return err
	}
	logKey := ns + ":log"
	reg := job.NewRegistry()
	span := func(ctx context.Context, what string, j *job.Job[Args]) error {
		if !spans {
			return nil
		}
		rec := fmt.Sprintf("%s %s %s %d %d", what, name, j.ID, j.Attempt, time.Now().UnixNano())
		if err := rdb.RPush(context.WithoutCancel(ctx), ns+":spans", rec).Err(); err != nil {
			return fmt.Errorf("recording the handler's %s: %w", what, err)
		}
		return nil
	}
	handle := func(ctx context.Context, j *job.Job[Args]) error {
		if err := span(ctx, "start", j); err != nil {
			return err
		}
		if maxDelay > 0 {
			time.Sleep(rand.N(maxDelay))
		}
		outcome, result := "ok", error(nil)
		switch {
		case j.Args.Poison:
			outcome, result = "poison", retry.Permanent(errors.New("poison job"))
		case rand.Float64() < failP:
			outcome, result = "fail", errors.New("transient failure")
		}
		rec := fmt.Sprintf("%s %s %d %s", j.ID, name, j.Attempt, outcome)
		if err := rdb.RPush(context.WithoutCancel(ctx), logKey, rec).Err(); err != nil {
			return fmt.Errorf("recording the handling: %w", err)
		}
		if err := span(ctx, "end", j); err != nil {
			return err
		}
		return result
	}
	Fault.Handle(reg, handle)
	if os.Getenv("FAULTWORKER_CHAINED") == "1" {
		// The chain suite's next jobs of another queue (and slot).
		Chained.Handle(reg, handle)
	}
	logger := zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Str("worker", name).Logger()
	w, err := worker.New(worker.Options{
		Broker:            b,
		Registry:          reg,
		Concurrency:       concurrency,
		Lease:             lease,
		HeartbeatInterval: lease / 4,
		MaxIdle:           500 * time.Millisecond,
		ShutdownTimeout:   2 * time.Second,
		Logger:            &logger,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// client connects to url: a Redis Cluster for redis+cluster://, whose
// comma-separated hosts are its seeds, else one server.
func client(url string) (redis.UniversalClient, error) {
	if seeds, ok := strings.CutPrefix(url, "redis+cluster://"); ok {
		addrs := strings.Split(seeds, ",")
		if slices.Contains(addrs, "") {
			return nil, fmt.Errorf("FAULTWORKER_URL=%q: want redis+cluster://host:port,host:port,...", url)
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}), nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opts), nil
}

func floatEnv(key string, def float64) (float64, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return 0, fmt.Errorf("%s=%q: want a probability in [0, 1]", key, v)
	}
	return f, nil
}

func durationEnv(key string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a non-negative duration", key, v)
	}
	return d, nil
}
