package delayqtest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// A Runner decides exactly what a real worker decides for the same jobs:
// the same outcome, delay and error, through the same middleware; next
// jobs (job.Then, job.Next) that the broker refuses, one over its payload
// cap included, fail the success for good on both.
func TestRunnerAgreesWithWorker(t *testing.T) {
	t.Parallel()
	const payloadCap = 1000
	b := delayqtest.NewBroker(t, broker.Options{MaxPayloadBytes: payloadCap})
	typ := job.New[SMS]("sms.agree", job.Retry(retry.Constant(time.Hour)), job.MaxRetries(4))
	later := job.New[SMS]("sms.agree.later")
	small, err := later.Envelope(SMS{To: "+1"}, job.In(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	big, err := later.Envelope(SMS{To: "+1", Body: strings.Repeat("x", payloadCap)}, job.In(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]job.Option{
		"type policy":          {job.ID("type-policy")},
		"job backoff":          {job.ID("job-backoff"), job.WithBackoff(retry.Exponential{Initial: 2 * time.Hour, Multiplier: 2, Max: 10 * time.Hour})},
		"budget spent":         {job.ID("budget-spent"), job.MaxRetries(0)},
		"permanent":            {job.ID("permanent")},
		"retry.After":          {job.ID("after")},
		"retry.Snooze":         {job.ID("snooze")},
		"success":              {job.ID("success")},
		"decode is fine":       {job.ID("plain")},
		"header and more":      {job.ID("header"), job.Header("k", "v")},
		"job.Next":             {job.ID("next-small")},
		"job.Next over cap":    {job.ID("next-big")},
		"job.Then over cap":    {job.ID("then-big"), job.Then(big)},
		"job.Then and success": {job.ID("then-small"), job.Then(small)},
	}
	handler := func(ctx context.Context, j *job.Job[SMS]) error {
		switch j.ID {
		case "permanent":
			return retry.Permanent(errors.New("no"))
		case "after":
			return retry.After(3*time.Hour, errors.New("later"))
		case "snooze":
			return retry.Snooze(4 * time.Hour)
		case "success", "plain", "then-big", "then-small":
			return nil
		case "next-small":
			return job.Next(ctx, small)
		case "next-big":
			return job.Next(ctx, big)
		}
		return errors.New("failed")
	}
	// What the worker decided for each job, and the job as it was stored
	// (with its creation time, which names its next jobs). The first
	// outcome of an id is the worker's: the Runner's runs go through the
	// same middleware later.
	var mu sync.Mutex
	fromWorker := map[string]job.Result{}
	stored := map[string]job.Envelope{}
	capture := func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			job.OnResult(ctx, func(r job.Result) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := fromWorker[m.ID]; !ok {
					fromWorker[m.ID], stored[m.ID] = r, m.Envelope
				}
			})
			return next.Handle(ctx, m)
		})
	}
	reg := job.NewRegistry()
	typ.Handle(reg, handler)
	mws := []job.Middleware{capture}
	delayqtest.StartWorker(t, worker.Options{Broker: b, Registry: reg, Middleware: mws, MaxIdle: 100 * time.Millisecond})
	for _, opts := range cases {
		if _, err := typ.Enqueue(ctx, b, SMS{To: "+1"}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	delayqtest.WaitFor(t, 30*time.Second, "the worker's outcomes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fromWorker) == len(cases)
	})

	rn := &delayqtest.Runner{Registry: reg, Middleware: mws, MaxPayloadBytes: payloadCap}
	for name, opts := range cases {
		env, err := typ.Envelope(SMS{To: "+1"}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		w := fromWorker[env.ID]
		env.CreatedAt = stored[env.ID].CreatedAt
		mu.Unlock()
		res, err := rn.Attempt(ctx, env, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != w.Outcome || res.Delay != w.Delay || errText(res.Err) != errText(w.Err) {
			t.Errorf("%s: runner %s; worker %s after %v: %v", name, res, w.Outcome, w.Delay, w.Err)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// NewBroker gives each test a broker of its own: a job enqueued in one is
// not seen by another, and a worker started with StartWorker handles it.
func TestNewBrokerIsolatedAndWorking(t *testing.T) {
	t.Parallel()
	b1 := delayqtest.NewBroker(t, broker.Options{})
	b2 := delayqtest.NewBroker(t, broker.Options{})
	typ := job.New[Order]("order.work")
	if _, err := typ.Enqueue(ctx, b1, Order{ID: "1"}, job.ID("o-1"), job.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Job(ctx, naming.DefaultQueue, "o-1"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("the second broker sees the first's job: %v", err)
	}
	done := make(chan string, 1)
	reg := job.NewRegistry()
	typ.Handle(reg, func(_ context.Context, j *job.Job[Order]) error { done <- j.Args.ID; return nil })
	stop := delayqtest.StartWorker(t, worker.Options{Broker: b2, Registry: reg})
	if _, err := typ.Enqueue(ctx, b2, Order{ID: "2"}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-done:
		if id != "2" {
			t.Errorf("handled %q", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not handle the job")
	}
	stop()
	stop() // a second stop is a no-op

	// A bad broker option fails the test, saying so.
	mustFail(t, func(tb testing.TB) { delayqtest.NewBroker(tb, broker.Options{Namespace: "a b"}) }, "delayqtest: broker:", `namespace "a b"`)
	mustFail(t, func(tb testing.TB) { delayqtest.StartWorker(tb, worker.Options{}) }, "delayqtest: worker:", "Broker is required")
}

// Without redis-server on PATH the broker runs on the embedded server;
// with REDIS_URL it runs on that server, on a namespace of its own whose
// keys are deleted when the test ends. (Not parallel: it sets PATH and
// REDIS_URL.)
func TestRedisChoosesServer(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "outside", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var ns string
	t.Run("REDIS_URL", func(t *testing.T) {
		t.Setenv("REDIS_URL", "redis://"+srv.Addr()+"/0")
		b := delayqtest.NewBroker(t, broker.Options{})
		ns = b.Namespace()
		if _, err := job.New[Order]("order.x").Enqueue(ctx, b, Order{ID: "1"}, job.In(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if keys, _ := rdb.Keys(ctx, ns+":*").Result(); len(keys) == 0 {
			t.Errorf("no keys under %s on the REDIS_URL server", ns)
		}
	})
	if keys, err := rdb.Keys(ctx, ns+":*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys of the namespace after the test: %v, %v", keys, err)
	}
	if v, _ := rdb.Get(ctx, "outside").Result(); v != "1" {
		t.Error("a key outside the namespace was deleted")
	}
	t.Run("embedded", func(t *testing.T) {
		t.Setenv("REDIS_URL", "")
		t.Setenv("PATH", t.TempDir())
		b := delayqtest.NewBroker(t, broker.Options{})
		if _, err := job.New[Order]("order.x").Enqueue(ctx, b, Order{ID: "1"}, job.ID("x")); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Job(ctx, naming.DefaultQueue, "x"); err != nil || got.State != job.StateScheduled {
			t.Errorf("job on the embedded server: %+v, %v", got, err)
		}
	})
}
