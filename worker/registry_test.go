package worker_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// TestWorkerRegistersItself: a running worker is listed in the process
// registry with its queues, concurrency, types and the jobs it holds, and
// is gone from it as soon as Run returns; with a negative ProcessTTL it is
// never listed, and a ProcessTTL below fleetreg.MinTTL is refused by New.
func TestWorkerRegistersItself(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	release := make(chan struct{})
	job.New[struct{}]("order.ship", job.Queue("orders")).Handle(tb.reg, func(ctx context.Context, _ *job.Job[struct{}]) error {
		<-release
		return nil
	})
	for _, id := range []string{"o-2", "o-1"} {
		if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: id, Queue: "orders", Type: "order.ship", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := tb.config(t)
	cfg.Queues = []worker.Queue{{Name: "orders"}, {Name: "mail"}}
	cfg.Concurrency = 3
	cfg.ProcessTTL = 300 * time.Millisecond
	stop := start(t, cfg)

	var me fleet.Process
	redistest.WaitFor(t, 30*time.Second, "the worker's record lists the 2 jobs it holds", func() bool {
		s, err := fleet.List(tb.ctx, tb.rdb, tb.ns)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Processes) != 1 {
			return false
		}
		me = s.Processes[0]
		return me.Held == 2
	})
	if me.Role != fleet.RoleWorker || me.PID != os.Getpid() || me.TTL != cfg.ProcessTTL ||
		!slices.Equal(me.Queues, []fleet.Queue{{Name: "orders", Concurrency: 3}, {Name: "mail", Concurrency: 3}}) ||
		!slices.Equal(me.Types, []string{"order.ship"}) || me.Info["concurrency"] != "3" {
		t.Errorf("registered %+v", me)
	}
	if want := []fleet.HeldJob{{Queue: "orders", ID: "o-1"}, {Queue: "orders", ID: "o-2"}}; !slices.Equal(me.HeldJobs, want) {
		t.Errorf("held jobs %v, want %v", me.HeldJobs, want)
	}
	close(release)
	stop()
	// Deregistered by the end of Run, not by the expiry.
	s, err := fleet.List(tb.ctx, tb.rdb, tb.ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Processes) != 0 {
		t.Errorf("after Run returned, the registry lists %+v", s.Processes)
	}

	cfg.ProcessTTL = -1
	stop = start(t, cfg)
	time.Sleep(200 * time.Millisecond) // a registration would be written at once
	if s, err := fleet.List(tb.ctx, tb.rdb, tb.ns); err != nil || len(s.Processes) != 0 {
		t.Errorf("ProcessTTL -1: the registry lists %+v (%v)", s.Processes, err)
	}
	stop()

	cfg.ProcessTTL = fleetreg.MinTTL - time.Millisecond
	if _, err := worker.New(cfg); err == nil || !strings.Contains(err.Error(), "ProcessTTL") {
		t.Errorf("New with ProcessTTL below the minimum: %v", err)
	}
}

// TestDefaultLoggerWarnsOnStderr: without Options.Logger the worker's
// warnings (here: a registered type whose queue it does not serve) reach
// standard error; its info lines do not.
func TestDefaultLoggerWarnsOnStderr(t *testing.T) {
	// Not parallel: it swaps os.Stderr.
	tb := setup(t)
	job.New[struct{}]("mail.send", job.Queue("mail")).Handle(tb.reg, func(context.Context, *job.Job[struct{}]) error { return nil })
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = pw
	cfg := tb.config(t)
	cfg.Logger = nil
	cfg.Queues = []worker.Queue{{Name: "orders"}}
	cfg.ProcessTTL = -1
	w, err := worker.New(cfg)
	os.Stderr = saved
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_ = pw.Close()
	out, _ := io.ReadAll(r)
	if !strings.Contains(string(out), `"level":"warn"`) || !strings.Contains(string(out), `"type":"mail.send"`) ||
		!strings.Contains(string(out), "its queue is not served by this worker") {
		t.Errorf("stderr:\n%s", out)
	}
	if strings.Contains(string(out), "worker started") {
		t.Errorf("info lines on stderr by default:\n%s", out)
	}
}
