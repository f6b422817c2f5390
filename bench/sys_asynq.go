package main

import (
	"context"
	"time"

	"github.com/hibiken/asynq"
)

// asynq with its defaults, and asynq-fast with the delayed-task check
// interval (how often scheduled tasks are moved to the pending list) lowered
// from 5 s to 100 ms. ProcessAt keeps whole seconds, so jobs can start up to
// 1 s before their ready time; that is measured, not corrected.
func init() {
	register("asynq", func(url string) (System, error) { return newAsynq(url, "asynq", 0) })
	register("asynq-fast", func(url string) (System, error) { return newAsynq(url, "asynq-fast", 100*time.Millisecond) })
}

const asynqTaskType = "bench:job"

type asynqSys struct {
	name         string
	opt          asynq.RedisConnOpt
	delayedCheck time.Duration
	client       *asynq.Client
	srv          *asynq.Server
}

func newAsynq(url, name string, delayedCheck time.Duration) (System, error) {
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		return nil, err
	}
	return &asynqSys{name: name, opt: opt, delayedCheck: delayedCheck, client: asynq.NewClient(opt)}, nil
}

func (a *asynqSys) Name() string { return a.name }

func (a *asynqSys) Enqueue(ctx context.Context, j Job) error {
	_, err := a.client.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, j.Payload), asynq.TaskID(j.ID), asynq.ProcessAt(j.ReadyAt))
	return err
}

// EnqueueBatch: asynq v0.26 has no batch enqueue.
func (a *asynqSys) EnqueueBatch(ctx context.Context, js []Job) error { return errNoBatch }

func (a *asynqSys) Start(ctx context.Context, concurrency int, handle func(id string)) error {
	cfg := asynq.Config{
		Concurrency: concurrency,
		// Only the log level differs from the defaults, to keep INFO lines
		// out of the report.
		LogLevel:                 asynq.WarnLevel,
		DelayedTaskCheckInterval: a.delayedCheck, // 0 = default (5 s)
	}
	a.srv = asynq.NewServer(a.opt, cfg)
	return a.srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		handle(id)
		return nil
	}))
}

func (a *asynqSys) Stop() error {
	if a.srv != nil {
		a.srv.Shutdown()
		a.srv = nil
	}
	return nil
}

func (a *asynqSys) Close() error { return a.client.Close() }
