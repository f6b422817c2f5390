package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
)

// newService returns a service on a recording enqueuer, with a 30-minute
// window as a shop would have.
func newService(crash ...string) (*Service, *delayqtest.Enqueuer) {
	e := &delayqtest.Enqueuer{}
	s := &Service{
		store: NewStore(), jobs: e, window: 30 * time.Minute, clock: demo.NewClock(),
		done: make(chan string, 16), crashOnce: map[string]bool{},
	}
	for _, id := range crash {
		s.crashOnce[id] = true
	}
	return s, e
}

// runner returns a Runner with the service's handler.
func runner(s *Service) *delayqtest.Runner {
	reg := job.NewRegistry()
	CancelUnpaid.Handle(reg, s.HandleCancelUnpaid)
	return &delayqtest.Runner{Registry: reg}
}

// Placing an order schedules its timeout once, with the order id as the
// job id, a payment window ahead; placing it again schedules nothing more.
func TestPlaceSchedulesOneTimeout(t *testing.T) {
	s, e := newService()
	for range 2 {
		if err := s.Place(t.Context(), "order-1", 2500); err != nil {
			t.Fatal(err)
		}
	}
	delayqtest.RequireEnqueued(t, e, CancelUnpaid,
		delayqtest.HasID("order-1"), delayqtest.InQueue("orders"),
		delayqtest.HasArgs(OrderRef{ID: "order-1"}), delayqtest.ReadyIn(30*time.Minute, time.Second))
}

// Paying cancels the timeout; paying a cancelled order is refused.
func TestPayCancelsTimeout(t *testing.T) {
	s, e := newService()
	ctx := t.Context()
	for _, id := range []string{"order-1", "order-2"} {
		if err := s.Place(ctx, id, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Pay(ctx, "order-1"); err != nil {
		t.Fatal(err)
	}
	delayqtest.RequireEnqueued(t, e, CancelUnpaid, delayqtest.HasID("order-1"), delayqtest.Cancelled())
	delayqtest.RequireEnqueued(t, e, CancelUnpaid, delayqtest.HasID("order-2"), delayqtest.Pending())

	res, err := delayqtest.Run(ctx, runner(s), CancelUnpaid, OrderRef{ID: "order-2"}, job.ID("order-2"))
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)
	if err := s.Pay(ctx, "order-2"); !errors.Is(err, ErrCancelled) {
		t.Errorf("late payment: %v, want ErrCancelled", err)
	}
}

// The handler leaves a paid order alone, and a redelivery after a crash
// that followed the side effect releases the stock once.
func TestHandlerIsIdempotent(t *testing.T) {
	s, _ := newService("order-3")
	ctx := t.Context()
	for _, id := range []string{"order-1", "order-3"} {
		s.store.Insert(id, 1000)
	}
	if err := s.store.MarkPaid("order-1"); err != nil {
		t.Fatal(err)
	}
	rn := runner(s)
	res, err := delayqtest.Run(ctx, rn, CancelUnpaid, OrderRef{ID: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)

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
	for _, o := range s.store.All() {
		if want := map[string]string{"order-1": Paid, "order-3": Cancelled}[o.ID]; o.State != want || o.Restocked > 1 {
			t.Errorf("%s: %s, restocked %d times; want %s, at most once", o.ID, o.State, o.Restocked, want)
		}
	}
}

// An unknown order fails the attempt and is retried, then dead-lettered
// when the budget is spent, for a person to look at.
func TestUnknownOrderRetried(t *testing.T) {
	s, _ := newService()
	res, err := delayqtest.Run(context.Background(), runner(s), CancelUnpaid, OrderRef{ID: "order-404"}, job.MaxRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	res.RequireRetry(t, 200*time.Millisecond, 200*time.Millisecond)
	env, err := CancelUnpaid.Envelope(OrderRef{ID: "order-404"}, job.MaxRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	last, err := runner(s).Attempt(context.Background(), env, 2)
	if err != nil {
		t.Fatal(err)
	}
	last.RequireDead(t, "retries exhausted")
}
