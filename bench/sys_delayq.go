package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// delayq on its public API: a broker.Broker, one job.Type whose arguments
// are the raw JSON payload, and a worker.Worker. Everything is at its
// default except the producer's connection pool (sized for the producer
// goroutines, as a user running many producers would) and the worker's
// Concurrency, which the harness sets. "delayq-prefetch" is the same with
// the one opt-in worker setting for fast handlers at low concurrency,
// worker.Options.Prefetch = Concurrency; it is not in the default systems.
func init() {
	register("delayq", func(url string) (System, error) { return newDelayq(url, "delayq", false) })
	register("delayq-prefetch", func(url string) (System, error) { return newDelayq(url, "delayq-prefetch", true) })
	optIn["delayq-prefetch"] = true
}

// delayqJob carries the harness payload byte for byte.
var delayqJob = job.New[json.RawMessage]("bench.job")

type delayqSys struct {
	name     string
	prefetch bool // worker.Options.Prefetch = Concurrency
	url      string
	rdb      *redis.Client
	br       *broker.Broker
	cons     *redis.Client
	cancel   context.CancelFunc
	done     chan error
}

func newDelayq(url, name string, prefetch bool) (System, error) {
	rdb, err := newRedisClient(url, 32)
	if err != nil {
		return nil, err
	}
	br, err := broker.New(rdb, broker.Options{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &delayqSys{name: name, prefetch: prefetch, url: url, rdb: rdb, br: br}, nil
}

func (d *delayqSys) Name() string { return d.name }

// Enqueue is one typed Enqueue call.
func (d *delayqSys) Enqueue(ctx context.Context, j Job) error {
	_, err := delayqJob.Enqueue(ctx, d.br, json.RawMessage(j.Payload), job.ID(j.ID), job.At(j.ReadyAt))
	return err
}

// EnqueueBatch builds the typed envelopes (each with its own id and ready
// time) and stores them with one broker Enqueue call.
func (d *delayqSys) EnqueueBatch(ctx context.Context, js []Job) error {
	envs := make([]*job.Envelope, len(js))
	for i, j := range js {
		env, err := delayqJob.Envelope(json.RawMessage(j.Payload), job.ID(j.ID), job.At(j.ReadyAt))
		if err != nil {
			return err
		}
		envs[i] = env
	}
	return d.br.Enqueue(ctx, envs...)
}

func (d *delayqSys) Start(ctx context.Context, concurrency int, handle func(id string)) error {
	// The worker gets a client of its own, as a separate consumer process
	// would; its pool covers the fetcher, acker, heartbeat, reaper and
	// retries of failed handlers.
	cons, err := newRedisClient(d.url, 0)
	if err != nil {
		return err
	}
	br, err := broker.New(cons, broker.Options{})
	if err != nil {
		cons.Close()
		return err
	}
	reg := job.NewRegistry()
	delayqJob.Handle(reg, func(_ context.Context, j *job.Job[json.RawMessage]) error {
		handle(j.ID)
		return nil
	})
	cfg := worker.Options{Broker: br, Registry: reg, Concurrency: concurrency}
	if d.prefetch {
		cfg.Prefetch = concurrency
	}
	w, err := worker.New(cfg)
	if err != nil {
		cons.Close()
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cons, d.cancel, d.done = cons, cancel, make(chan error, 1)
	go func() { d.done <- w.Run(rctx) }()
	return nil
}

func (d *delayqSys) Stop() error {
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	err := <-d.done
	d.cancel = nil
	return errors.Join(err, d.cons.Close())
}

func (d *delayqSys) Close() error { return d.rdb.Close() }
