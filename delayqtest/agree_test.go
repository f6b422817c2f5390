package delayqtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
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
			c, err := typ.Cancel(ctx, s, "order-1")
			return fmt.Sprintf("running %v", c.Running), err
		}},
		{"cancel again", func(s store) (string, error) {
			c, err := typ.Cancel(ctx, s, "order-1")
			return fmt.Sprintf("running %v", c.Running), err
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
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasID("order-1"), delayqtest.ReadyAt(epoch.Add(time.Hour), 0))
	})
	if _, err := cancelUnpaid.Cancel(ctx, e, "order-1"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := cancelUnpaid.Cancel(ctx, e, "order-1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Cancel again: %v; want broker.ErrNotFound", err)
	}
	if _, err := cancelUnpaid.Lookup(ctx, e, "order-1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Lookup of the cancelled job: %v, want broker.ErrNotFound", err)
	}
}

// The Enqueuer debounces as a broker does, row by row of the table of
// docs/flow-control.md#debounce: the same answers (nil, or the same error)
// for nothing pending, a job in its window, a due job, a running job
// (claimed by a worker on the broker, by Claim on the kit) and one that
// ended; the job left has the same arguments and state, ready at the end
// of the window or at its own ready time, kept; debounced jobs of one key
// in one call each act on the one before; what debounce cannot be
// combined with is refused alike.
func TestDebounceAgreesWithBroker(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	now := time.Now()
	kit := &delayqtest.Enqueuer{Now: func() time.Time { return now }}
	brk := delayqtest.NewBroker(t, broker.Options{})
	digest := job.New[Order]("notify.digest", job.Queue("notify"))
	live := job.New[Order]("notify.live", job.Queue("live"))

	// A job on the broker that runs until released.
	started, release := make(chan struct{}, 1), make(chan struct{})
	reg := job.NewRegistry()
	live.Handle(reg, func(_ context.Context, _ *job.Job[Order]) error {
		started <- struct{}{}
		<-release
		return nil
	})
	delayqtest.StartWorker(t, worker.Options{Broker: brk, Registry: reg, MaxIdle: 50 * time.Millisecond})

	// when says where an accepted job's ready time is: the end of the
	// window, or a time that has passed (kept).
	when := func(env *job.Envelope) string {
		switch d := env.ReadyAt.Sub(env.CreatedAt); {
		case d > window-time.Minute && d < window+time.Minute:
			return "ready at the end of the window"
		case d < time.Minute:
			return "ready at a time that has passed"
		}
		return fmt.Sprintf("ready in %v", env.ReadyAt.Sub(env.CreatedAt))
	}
	debounce := func(typ *job.Type[Order], key, args string) func(s store) (string, error) {
		return func(s store) (string, error) {
			env, err := typ.Enqueue(ctx, s, Order{ID: args}, job.Debounce(key, window))
			if err != nil {
				return "", err
			}
			return when(env), nil
		}
	}
	lookup := func(typ *job.Type[Order], id string) func(s store) (string, error) {
		return func(s store) (string, error) {
			j, err := typ.Lookup(ctx, s, id)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s %s", j.State, j.Envelope.Payload), nil
		}
	}
	due := func(typ *job.Type[Order], id string) func(s store) (string, error) {
		return func(s store) (string, error) {
			_, err := typ.Reschedule(ctx, s, id, time.Time{}) // now: due
			return "", err
		}
	}
	type step struct {
		name string
		do   func(s store) (string, error)
	}
	run := func(steps []step) {
		t.Helper()
		for _, st := range steps {
			gotKit, errKit := st.do(kit)
			gotReal, errReal := st.do(brk)
			if gotKit != gotReal || fmt.Sprint(errKit) != fmt.Sprint(errReal) {
				t.Errorf("%s: the kit answers %q, %v; the broker %q, %v", st.name, gotKit, errKit, gotReal, errReal)
			}
		}
	}
	run([]step{
		{"nothing pending", debounce(digest, "u1", "1")},
		{"in the window", debounce(digest, "u1", "2")},
		{"lookup in the window", lookup(digest, "u1")},
		{"the window closes", due(digest, "u1")},
		{"due, not claimed", debounce(digest, "u1", "3")},
		{"lookup of the due job", lookup(digest, "u1")},
		{"due again", debounce(digest, "u1", "4")},
		{"lookup of the due job again", lookup(digest, "u1")},
		{"one key twice in one call", func(s store) (string, error) {
			a, _ := digest.Envelope(Order{ID: "5"}, job.Debounce("u2", window))
			b, _ := digest.Envelope(Order{ID: "6"}, job.Debounce("u2", window))
			if err := s.Enqueue(ctx, a, b); err != nil {
				return "", err
			}
			return when(a) + ", " + when(b), nil
		}},
		{"lookup after the call", lookup(digest, "u2")},
		{"with Unique", func(s store) (string, error) {
			_, err := digest.Enqueue(ctx, s, Order{ID: "7"}, job.Debounce("u3", window), job.Unique(time.Hour))
			return "", err
		}},
		{"with another ID", func(s store) (string, error) {
			_, err := digest.Enqueue(ctx, s, Order{ID: "7"}, job.Debounce("u3", window), job.ID("other"))
			return "", err
		}},
		{"an envelope with a delay", func(s store) (string, error) {
			return "", s.Enqueue(ctx, &job.Envelope{Type: digest.Name(), Queue: "notify", ID: "u3", Payload: []byte(`{}`), Debounce: window, Delay: time.Minute})
		}},
		{"an envelope in a batch", func(s store) (string, error) {
			return "", s.Enqueue(ctx, &job.Envelope{Type: digest.Name(), Queue: "notify", ID: "u3", Payload: []byte(`{}`), Debounce: window, Batch: "b1"})
		}},
		{"EnqueueItems with one key", func(s store) (string, error) {
			_, err := digest.EnqueueItems(ctx, s, testkit.Items([]Order{{ID: "8"}, {ID: "9"}}, job.Debounce("u3", window)))
			return "", err
		}},
		{"lookup of the refused key", lookup(digest, "u3")},
		{"a job to run", debounce(live, "r1", "10")},
		{"its window closes", due(live, "r1")},
	})
	// The broker's worker claims it; the kit is told.
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not claim the job")
	}
	if err := kit.Claim("live", "r1"); err != nil {
		t.Fatal(err)
	}
	run([]step{
		{"running", debounce(live, "r1", "11")},
		{"lookup of the running job", func(s store) (string, error) {
			j, err := live.Lookup(ctx, s, "r1")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s %s", j.State, j.Envelope.Payload), nil
		}},
		{"cancel of the running job", func(s store) (string, error) {
			c, err := live.Cancel(ctx, s, "r1")
			return fmt.Sprintf("running %v", c.Running), err
		}},
	})
	close(release)
	delayqtest.WaitFor(t, 30*time.Second, "the running job to end", func() bool {
		_, err := brk.Job(ctx, "live", "r1")
		return errors.Is(err, broker.ErrNotFound)
	})
	if err := kit.End("live", "r1"); err != nil {
		t.Fatal(err)
	}
	run([]step{
		{"ended", debounce(live, "r1", "12")},
		{"lookup of the new job", lookup(live, "r1")},
	})
	// Not all nil: the kit refused a running job as the broker does, and
	// kept a due job's ready time.
	if _, err := live.Enqueue(ctx, kit, Order{ID: "13"}, job.Debounce("r1", window)); err != nil {
		t.Fatal(err)
	}
	if err := kit.Claim("live", "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := live.Enqueue(ctx, kit, Order{ID: "14"}, job.Debounce("r1", window)); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("a running job on the kit: %v, want ErrInProgress", err)
	}
	if j, err := digest.Lookup(ctx, kit, "u1"); err != nil || !j.ReadyAt.Equal(time.UnixMilli(now.UnixMilli())) || string(j.Envelope.Payload) != `{"id":"4"}` {
		t.Fatalf("the due job on the kit: %+v, %v; want the last arguments, ready at the time it was made due", j, err)
	}
}
