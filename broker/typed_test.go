package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

type order struct {
	ID string `json:"id"`
}

// countingEnqueuer counts the calls that reach the broker.
type countingEnqueuer struct {
	b     *broker.Broker
	calls int
}

func (c *countingEnqueuer) Enqueue(ctx context.Context, envs ...*job.Envelope) error {
	c.calls++
	return c.b.Enqueue(ctx, envs...)
}

func TestTypedHelpers(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[order]("order.timeout", job.Queue("orders"))
	if typ.Queue() != "orders" || job.New[order]("x").Queue() != naming.DefaultQueue {
		t.Fatalf("Queue() = %q", typ.Queue())
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, order{"1"}, job.ID("o-1"), job.In(time.Minute)); err != nil {
		t.Fatal(err)
	}
	info, err := typ.Lookup(tb.ctx, tb.b, "o-1")
	if err != nil || info.State != job.StateScheduled || info.Queue != "orders" || !info.ReadyAt.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("Lookup: %+v, %v", info, err)
	}
	at, err := typ.Reschedule(tb.ctx, tb.b, "o-1", epoch.Add(time.Hour))
	if err != nil || !at.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("Reschedule: %v, %v", at, err)
	}
	if _, err := typ.Cancel(tb.ctx, tb.b, "o-1"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := typ.Cancel(tb.ctx, tb.b, "o-1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Cancel again: %v; want ErrNotFound", err)
	}
	if _, err := typ.Lookup(tb.ctx, tb.b, "o-1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Lookup after cancel: %v", err)
	}
	if _, err := typ.Reschedule(tb.ctx, tb.b, "o-1", epoch); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Reschedule after cancel: %v", err)
	}
}

func TestEnqueueItems(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.DeclareQueue(tb.ctx, "orders", 3); err != nil {
		t.Fatal(err)
	}
	typ := job.New[order]("order.timeout", job.Queue("orders"))
	if _, err := typ.Enqueue(tb.ctx, tb.b, order{"taken"}, job.ID("o-taken")); err != nil {
		t.Fatal(err)
	}
	items := []job.Item[order]{
		{Args: order{"1"}, Opts: []job.Option{job.ID("o-1"), job.In(time.Minute)}},
		{Args: order{"2"}, Opts: []job.Option{job.ID("o-2"), job.At(epoch.Add(time.Hour))}},
		{Args: order{"other"}, Opts: []job.Option{job.ID("o-taken")}},
		{Args: order{"3"}},
	}
	c := &countingEnqueuer{b: tb.b}
	envs, err := typ.EnqueueItems(tb.ctx, c, items)
	var be *job.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 4 || be.Errs[0] != nil || be.Errs[1] != nil || be.Errs[3] != nil || !errors.Is(be.Errs[2], broker.ErrDuplicate) {
		t.Fatalf("err = %v, want a BatchError with only item 3 a duplicate", err)
	}
	if c.calls != 1 {
		t.Fatalf("%d broker calls, want 1", c.calls)
	}
	if !envs[0].ReadyAt.Equal(epoch.Add(time.Minute)) || !envs[1].ReadyAt.Equal(epoch.Add(time.Hour)) || envs[3].ID == "" || envs[3].Queue != "orders" {
		t.Fatalf("envelopes %+v %+v %+v", envs[0], envs[1], envs[3])
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "orders"))
	if err != nil || st.Scheduled != 4 {
		t.Fatalf("stats %+v, %v; want 4 scheduled", st, err)
	}

	// A bad item refuses the whole call, naming it; nothing is written.
	for name, bad := range map[string][]job.Item[order]{
		"bad option": {{Args: order{"4"}, Opts: []job.Option{job.ID("o-4")}}, {Args: order{"5"}, Opts: []job.Option{job.In(-time.Second)}}},
		"same id":    {{Args: order{"4"}, Opts: []job.Option{job.ID("o-4")}}, {Args: order{"5"}, Opts: []job.Option{job.ID("o-4")}}},
	} {
		_, err := typ.EnqueueItems(tb.ctx, c, bad)
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "2") {
			t.Errorf("%s: %v, want ErrInvalid naming item 2", name, err)
		}
	}
	if c.calls != 1 {
		t.Fatalf("bad items reached the broker (%d calls)", c.calls)
	}
	if _, err := tb.b.Job(tb.ctx, "orders", "o-4"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("o-4 stored by a refused call: %v", err)
	}
}
