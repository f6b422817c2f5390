package delayqtest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/job"
)

// store is what code under test is given: a real broker, or the kit's
// Enqueuer standing in for one.
type store interface {
	job.Enqueuer
	job.Controller
}

// The Enqueuer answers as a broker does, call for call: the same errors
// (or none) for the same enqueues (two calls with one id in the same
// millisecond with different delays, Replace in the same millisecond,
// Unique content twice, a payload over the cap, a batch with one id twice)
// and for the typed helpers Type.Cancel, Type.Reschedule and Type.Lookup
// used on each.
func TestEnqueuerAgreesWithBroker(t *testing.T) {
	t.Parallel()
	const payloadCap = 200
	now := time.Now()
	// The kit's clock is pinned, so that every enqueue of the script is in
	// one millisecond there; on the broker they are as close as calls get.
	kit := &delayqtest.Enqueuer{Now: func() time.Time { return now }, MaxPayloadBytes: payloadCap}
	brk := delayqtest.NewBroker(t, broker.Options{MaxPayloadBytes: payloadCap})
	typ := job.New[Order]("order.cancel_unpaid", job.Queue("orders"))
	remind := job.New[Order]("order.remind", job.Queue("orders"), job.Unique(time.Hour))
	at := now.Add(2 * time.Hour).Truncate(time.Millisecond)

	type step struct {
		name string
		do   func(s store) (string, error)
	}
	enqueue := func(t *job.Type[Order], args Order, opts ...job.Option) func(s store) (string, error) {
		return func(s store) (string, error) {
			env, err := t.Enqueue(ctx, s, args, opts...)
			if err != nil || env.At.IsZero() {
				return "", err
			}
			return env.ReadyAt.UTC().Format(time.RFC3339Nano), nil
		}
	}
	steps := []step{
		{"enqueue", enqueue(typ, Order{ID: "1"}, job.ID("order-1"), job.In(time.Hour))},
		{"the same id, another delay, the same ms", enqueue(typ, Order{ID: "1"}, job.ID("order-1"), job.In(90*time.Minute))},
		{"the very envelope again", enqueue(typ, Order{ID: "1"}, job.ID("order-1"), job.In(time.Hour))},
		{"replace in the same ms", enqueue(typ, Order{ID: "1b"}, job.ID("order-1"), job.At(at), job.Replace())},
		{"lookup", func(s store) (string, error) {
			j, err := typ.Lookup(ctx, s, "order-1")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s %s %s", j.State, j.ReadyAt.UTC().Format(time.RFC3339Nano), j.Envelope.Payload), nil
		}},
		{"unique", enqueue(remind, Order{ID: "2"})},
		{"unique again", enqueue(remind, Order{ID: "2"})},
		{"over the payload cap", enqueue(typ, Order{ID: strings.Repeat("x", payloadCap)}, job.ID("big"))},
		{"a batch with one id twice", func(s store) (string, error) {
			a, _ := typ.Envelope(Order{ID: "3"}, job.ID("order-3"), job.In(time.Hour))
			b, _ := typ.Envelope(Order{ID: "3b"}, job.ID("order-3"), job.In(time.Hour), job.Replace())
			return "", s.Enqueue(ctx, a, b)
		}},
		{"reschedule", func(s store) (string, error) {
			ready, err := typ.Reschedule(ctx, s, "order-3", at.Add(time.Hour))
			return ready.UTC().Format(time.RFC3339Nano), err
		}},
		{"reschedule of no job", func(s store) (string, error) {
			_, err := typ.Reschedule(ctx, s, "order-9", at)
			return "", err
		}},
		{"cancel", func(s store) (string, error) {
			ok, err := typ.Cancel(ctx, s, "order-1")
			return fmt.Sprint(ok), err
		}},
		{"cancel again", func(s store) (string, error) {
			ok, err := typ.Cancel(ctx, s, "order-1")
			return fmt.Sprint(ok), err
		}},
		{"lookup of the cancelled job", func(s store) (string, error) {
			_, err := typ.Lookup(ctx, s, "order-1")
			return "", err
		}},
		{"enqueue after the cancel", enqueue(typ, Order{ID: "1"}, job.ID("order-1"), job.In(time.Hour))},
	}
	for _, st := range steps {
		gotKit, errKit := st.do(kit)
		gotReal, errReal := st.do(brk)
		if gotKit != gotReal || fmt.Sprint(errKit) != fmt.Sprint(errReal) {
			t.Errorf("%s: the kit answers %q, %v; the broker %q, %v", st.name, gotKit, errKit, gotReal, errReal)
		}
	}
	// The answers above are not all nil: the kit refused what the broker
	// refuses.
	var dup *broker.DuplicateError
	if _, err := typ.Enqueue(ctx, kit, Order{ID: "1"}, job.ID("order-1")); !errors.As(err, &dup) {
		t.Fatalf("a pending id on the kit: %v, want a DuplicateError", err)
	}
	if _, err := typ.Enqueue(ctx, kit, Order{ID: strings.Repeat("x", payloadCap)}); !errors.Is(err, broker.ErrPayloadTooLarge) || !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("a payload over the cap on the kit: %v", err)
	}
}

// The typed helpers work on the kit's Enqueuer: a job enqueued through it
// can be looked up, rescheduled and cancelled by the type alone.
func TestTypedHelpersOnTheKit(t *testing.T) {
	t.Parallel()
	e := &delayqtest.Enqueuer{Now: fixedClock}
	env, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "1"}, job.ID("order-1"), job.In(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	j, err := cancelUnpaid.Lookup(ctx, e, "order-1")
	if err != nil || j.State != job.StateScheduled || !j.ReadyAt.Equal(env.ReadyAt) || j.Envelope.Type != cancelUnpaid.Name() {
		t.Fatalf("Lookup: %+v, %v", j, err)
	}
	moved, err := cancelUnpaid.Reschedule(ctx, e, "order-1", epoch.Add(time.Hour))
	if err != nil || !moved.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("Reschedule: %v, %v", moved, err)
	}
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueued(tb, e, cancelUnpaid, delayqtest.HasID("order-1"), delayqtest.ReadyAt(epoch.Add(time.Hour), 0))
	})
	if ok, err := cancelUnpaid.Cancel(ctx, e, "order-1"); !ok || err != nil {
		t.Fatalf("Cancel: %v, %v", ok, err)
	}
	if ok, err := cancelUnpaid.Cancel(ctx, e, "order-1"); ok || !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Cancel again: %v, %v; want broker.ErrNotFound", ok, err)
	}
	if _, err := cancelUnpaid.Lookup(ctx, e, "order-1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Lookup of the cancelled job: %v, want broker.ErrNotFound", err)
	}
}
