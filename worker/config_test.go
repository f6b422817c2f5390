package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// With Options.Queues unset, a worker serves the queues of its registered
// types: a type declared on "sms" is run without naming the queue again.
func TestQueuesDefaultToRegisteredTypes(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sms := job.New[payload]("sms.send", job.Queue("sms"))
	mail := job.New[payload]("mail.send", job.Queue("mail"))
	var ran atomic.Int64
	for _, typ := range []*job.Type[payload]{sms, mail} {
		typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { ran.Add(1); return nil })
	}
	if got := strings.Join(tb.reg.Table(registry.Key{}).Queues(naming.DefaultQueue), ","); got != "mail,sms" {
		t.Fatalf("the registry's queues: %q", got)
	}
	cfg := tb.config(t)
	var logs syncBuffer
	l := zerolog.New(&logs).Level(zerolog.WarnLevel)
	cfg.Logger = &l
	start(t, cfg)
	for _, typ := range []*job.Type[payload]{sms, mail} {
		if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "both jobs run", func() bool { return ran.Load() == 2 })
	if s := logs.String(); strings.Contains(s, "not served") {
		t.Fatalf("warning with every queue served: %s", s)
	}
}

// A worker whose Queues leave a registered type's queue unserved says so at
// start, naming the type and the queue; it still starts.
func TestUnservedQueueWarnsAtStart(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	job.New[payload]("sms.send", job.Queue("sms")).Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return nil })
	job.New[payload]("mail.send").Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return nil })
	cfg := tb.config(t)
	cfg.Queues = []worker.Queue{{Name: naming.DefaultQueue}}
	var logs syncBuffer
	l := zerolog.New(&logs).Level(zerolog.WarnLevel)
	cfg.Logger = &l
	start(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "warning", func() bool { return strings.Contains(logs.String(), "not served") })
	s := logs.String()
	if !strings.Contains(s, `"type":"sms.send"`) || !strings.Contains(s, `"queue":"sms"`) || strings.Contains(s, "mail.send") {
		t.Fatalf("log %s: want one warning naming sms.send and queue sms", s)
	}
}

// Services start with the worker, see their context cancelled at shutdown,
// and Run returns only after they did; a failing service is logged and the
// worker goes on.
func TestServicesShareTheWorkersLife(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var started, stopped atomic.Bool
	long := worker.ServiceFunc(func(ctx context.Context) error {
		started.Store(true)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // cleanup that Run must wait for
		stopped.Store(true)
		return ctx.Err()
	})
	failing := worker.ServiceFunc(func(context.Context) error { return errors.New("relay: cannot connect") })
	panicking := worker.ServiceFunc(func(context.Context) error { panic("scheduler bug") })
	var ran atomic.Bool
	job.New[payload]("t").Handle(tb.reg, func(context.Context, *job.Job[payload]) error { ran.Store(true); return nil })
	cfg := tb.config(t)
	cfg.Services = []worker.Service{long, failing, panicking}
	var logs syncBuffer
	l := zerolog.New(&logs).Level(zerolog.WarnLevel)
	cfg.Logger = &l
	stop := start(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "service started", started.Load)
	redistest.WaitFor(t, 10*time.Second, "failure logged", func() bool {
		s := logs.String()
		return strings.Contains(s, "relay: cannot connect") && strings.Contains(s, "scheduler bug")
	})
	if _, err := job.New[payload]("t").Enqueue(tb.ctx, tb.b, payload{}); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "job run after a service failed", ran.Load)
	if stopped.Load() {
		t.Fatal("service stopped before the worker")
	}
	stop()
	if !stopped.Load() {
		t.Fatal("Run returned before the service did")
	}

	cfg.Services = []worker.Service{nil}
	if _, err := worker.New(cfg); err == nil || !strings.Contains(err.Error(), "Services[0]") {
		t.Fatalf("nil service: %v", err)
	}
	cfg.Services = nil
	cfg.Enqueue = []job.EnqueueMiddleware{func(e job.Enqueuer) job.Enqueuer { return e }, nil}
	if _, err := worker.New(cfg); err == nil || !strings.Contains(err.Error(), "Options.Enqueue[1] is nil") {
		t.Fatalf("nil enqueue middleware: %v", err)
	}
}
