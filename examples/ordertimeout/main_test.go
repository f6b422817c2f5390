package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// bundle is a service on a fresh SQLite database whose outbox is relayed
// to a recording enqueuer instead of Redis.
type bundle struct {
	svc   *Service
	store *Store
	e     *delayqtest.Enqueuer
}

// setup returns a bundle with a 30-minute window, as a shop would have;
// crash names orders whose first timeout attempt crashes.
func setup(t *testing.T, crash ...string) *bundle {
	t.Helper()
	store, err := OpenStore(t.Context(), filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s := &Service{store: store, window: 30 * time.Minute, clock: demo.NewClock(), done: make(chan string, 16), crashOnce: map[string]bool{}}
	for _, id := range crash {
		s.crashOnce[id] = true
	}
	return &bundle{svc: s, store: store, e: &delayqtest.Enqueuer{}}
}

// relay moves everything committed to the outbox so far to the recording
// enqueuer, through a real relay, and stops it.
func (bd *bundle) relay(t *testing.T) {
	t.Helper()
	r, err := outbox.NewRelay(bd.store.Outbox(), bd.e, outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	delayqtest.WaitFor(t, 10*time.Second, "the outbox relayed", func() bool {
		l, err := bd.store.Outbox().Lag(context.Background())
		return err == nil && l.Pending == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func (bd *bundle) order(t *testing.T, id string) Order {
	t.Helper()
	o, err := bd.store.get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// runner returns a Runner with the service's handler, registered as the
// program registers it.
func (bd *bundle) runner() *delayqtest.Runner {
	reg := job.NewRegistry()
	job.HandleResult(CancelUnpaid, reg, bd.svc.HandleCancelUnpaid)
	return &delayqtest.Runner{Registry: reg}
}

// Placing an order schedules its timeout once, with the order id as the
// job id, at its deadline; placing it again schedules nothing more.
func TestPlaceSchedulesOneTimeout(t *testing.T) {
	bd := setup(t)
	for range 2 {
		if err := bd.svc.Place(t.Context(), "order-1", 2500); err != nil {
			t.Fatal(err)
		}
	}
	bd.relay(t)
	o := bd.order(t, "order-1")
	delayqtest.RequireEnqueuedN(t, bd.e, CancelUnpaid, 1,
		delayqtest.HasID("order-1"), delayqtest.InQueue(CancelUnpaid.Queue()),
		delayqtest.HasArgs(OrderRef{ID: "order-1"}), delayqtest.ReadyAt(o.Deadline, time.Second))
	if d := time.Until(o.Deadline); d < 29*time.Minute || d > 30*time.Minute {
		t.Errorf("deadline %v away, want the 30-minute window", d)
	}
}

// Paying cancels the timeout in the same transaction: after it reached
// Redis, the relay cancels it there; before, it never gets there. Paying
// a cancelled order is refused.
func TestPayCancelsTimeout(t *testing.T) {
	bd := setup(t)
	ctx := t.Context()
	for _, id := range []string{"order-1", "order-2"} {
		if err := bd.svc.Place(ctx, id, 1000); err != nil {
			t.Fatal(err)
		}
	}
	bd.relay(t)
	if err := bd.svc.Pay(ctx, "order-1"); err != nil {
		t.Fatal(err)
	}
	if err := bd.svc.Place(ctx, "order-3", 1000); err != nil {
		t.Fatal(err)
	}
	if err := bd.svc.Pay(ctx, "order-3"); err != nil {
		t.Fatal(err)
	}
	bd.relay(t)
	delayqtest.RequireEnqueuedN(t, bd.e, CancelUnpaid, 1, delayqtest.HasID("order-1"), delayqtest.Cancelled())
	delayqtest.RequireEnqueuedN(t, bd.e, CancelUnpaid, 1, delayqtest.HasID("order-2"), delayqtest.Pending())
	delayqtest.RequireEnqueuedN(t, bd.e, CancelUnpaid, 0, delayqtest.HasID("order-3"))

	if _, err := bd.store.db.ExecContext(ctx, "UPDATE orders SET deadline_ms = 0 WHERE id = 'order-2'"); err != nil {
		t.Fatal(err)
	}
	res, err := delayqtest.Run(ctx, bd.runner(), CancelUnpaid, OrderRef{ID: "order-2"}, job.ID("order-2"))
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)
	if err := bd.svc.Pay(ctx, "order-2"); !errors.Is(err, ErrCancelled) {
		t.Errorf("late payment: %v, want ErrCancelled", err)
	}
}

// More time moves the deadline and, through job.Replace, the timeout: the
// pending job is the one with the new ready time.
func TestExtendMovesTimeout(t *testing.T) {
	bd := setup(t)
	ctx := t.Context()
	if err := bd.svc.Place(ctx, "order-1", 1000); err != nil {
		t.Fatal(err)
	}
	bd.relay(t)
	before := bd.order(t, "order-1").Deadline
	if err := bd.svc.Extend(ctx, "order-1", 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	bd.relay(t)
	after := bd.order(t, "order-1").Deadline
	if !after.Equal(before.Add(10 * time.Minute)) {
		t.Errorf("deadline %v after extending %v by 10m", after, before)
	}
	delayqtest.RequireEnqueuedN(t, bd.e, CancelUnpaid, 1, delayqtest.HasID("order-1"), delayqtest.Pending(),
		delayqtest.ReadyAt(after, time.Second), delayqtest.Where("with Replace", func(env *job.Envelope) bool { return env.Replace }))
	if err := bd.svc.Pay(ctx, "order-1"); err != nil {
		t.Fatal(err)
	}
	if err := bd.svc.Extend(ctx, "order-1", time.Minute); err == nil {
		t.Error("a paid order's window was extended")
	}
}

// The handler leaves a paid order alone, waits for a deadline that is
// still ahead, and a redelivery after a crash that followed the side
// effect releases the stock once.
func TestHandlerIsIdempotent(t *testing.T) {
	bd := setup(t, "order-3")
	ctx := t.Context()
	past := time.Now().Add(-time.Second)
	err := bd.store.InTx(ctx, func(tx *sql.Tx) error {
		for _, id := range []string{"order-1", "order-3"} {
			if _, err := bd.store.Insert(ctx, tx, id, 1000, past); err != nil {
				return err
			}
		}
		_, err := bd.store.Insert(ctx, tx, "order-4", 1000, time.Now().Add(time.Hour))
		if err == nil {
			err = bd.store.MarkPaid(ctx, tx, "order-1")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rn := bd.runner()
	res, err := delayqtest.Run(ctx, rn, CancelUnpaid, OrderRef{ID: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)

	res, err = delayqtest.Run(ctx, rn, CancelUnpaid, OrderRef{ID: "order-4"})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.RequireRetry(t, 59*time.Minute, time.Hour); res.Reason != "retry.After" {
		t.Errorf("a timeout before the deadline: %s, want retry.After (%v)", res, d)
	}

	// The first attempt crashes after cancelling: the Recover middleware
	// turns the panic into a retry after the type's 200ms.
	results, err := delayqtest.RunAll(ctx, rn, CancelUnpaid, OrderRef{ID: "order-3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d attempts, want a crash and a redelivery: %v", len(results), results)
	}
	results[0].RequireRetry(t, 200*time.Millisecond, 200*time.Millisecond)
	results[1].RequireSuccess(t)
	for id, want := range map[string]string{"order-1": Paid, "order-3": Cancelled, "order-4": Pending} {
		if o := bd.order(t, id); o.State != want || o.Restocked > 1 {
			t.Errorf("%s: %s, restocked %d times; want %s, at most once", id, o.State, o.Restocked, want)
		}
	}

	// An unknown order is retried, then dead-lettered for a person.
	env, err := CancelUnpaid.Envelope(OrderRef{ID: "order-404"}, job.MaxRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	last, err := rn.Attempt(ctx, env, 2)
	if err != nil {
		t.Fatal(err)
	}
	last.RequireDead(t, "retries exhausted")
}
