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
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

type Order struct {
	ID string `json:"id"`
}

var cancelUnpaid = job.New[Order]("order.cancel_unpaid", job.Queue("orders"), job.MaxRetries(3))

// fixedClock is a clock that stands still at a known instant.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fixedClock() time.Time { return epoch }

// What a piece of code enqueued is recorded with everything the broker
// fills in, and found by its id, queue, arguments, ready time and options.
func TestEnqueuerRecords(t *testing.T) {
	t.Parallel()
	e := &delayqtest.Enqueuer{Now: fixedClock}
	env, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "1001"}, job.ID("order-1001"), job.In(30*time.Minute), job.Header("tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	if !env.ReadyAt.Equal(epoch.Add(30*time.Minute)) || !env.CreatedAt.Equal(epoch) {
		t.Errorf("envelope after Enqueue: ready %v created %v", env.ReadyAt, env.CreatedAt)
	}
	if _, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "1002"}, job.ID("order-1002"), job.At(epoch.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}

	mustPass(t, func(tb testing.TB) {
		got := delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1,
			delayqtest.HasID("order-1001"), delayqtest.InQueue("orders"), delayqtest.HasArgs(Order{ID: "1001"}),
			delayqtest.ReadyIn(30*time.Minute, 0), delayqtest.ReadyAt(epoch.Add(30*time.Minute), 0),
			delayqtest.Where("max retries 3", func(env *job.Envelope) bool { return env.MaxRetries == 3 }),
			delayqtest.Where(`header tenant="acme"`, func(env *job.Envelope) bool { return env.Headers["tenant"] == "acme" }),
			delayqtest.Where("no timeout", func(env *job.Envelope) bool { return env.Timeout == 0 }), delayqtest.Pending())[0]
		if got.Args.ID != "1001" || got.Envelope.ID != "order-1001" {
			tb.Errorf("RequireEnqueuedN returned %+v", got)
		}
	})
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasArgs(Order{ID: "1002"}), delayqtest.ReadyIn(time.Hour, 0))
	})
	mustPass(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 2) })
	mustPass(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 0, delayqtest.HasID("order-9")) })
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.Where("a payload under 20 bytes", func(env *job.Envelope) bool { return len(env.Payload) < 20 }), delayqtest.HasID("order-1001"))
	})

	// Assertions that should fail do, and list what was enqueued.
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasID("order-1001"), delayqtest.ReadyIn(time.Hour, time.Second))
	}, "want 1 job(s) of type order.cancel_unpaid with id \"order-1001\", ready in 1h0m0s (±1s), found 0",
		`id "order-1001" queue "orders" ready in 30m0s args {ID:1001} — not ready in 1h0m0s (±1s)`,
		`id "order-1002" queue "orders" ready in 1h0m0s args {ID:1002} — not id "order-1001"`)
	mustFail(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1) }, "found 2")
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasArgs(Order{ID: "7"}))
	}, "args {ID:7}", "found 0")
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 0, delayqtest.HasID("order-1002"))
	}, "want 0 job(s)", "found 1")
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.Where(`header tenant="other"`, func(env *job.Envelope) bool { return env.Headers["tenant"] == "other" }))
	}, `header tenant="other"`)
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.InQueue("default"), delayqtest.HasID("order-1001"))
	}, `not queue "default"`)
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.Where("max retries 1", func(env *job.Envelope) bool { return env.MaxRetries == 1 }), delayqtest.HasID("order-1001"))
	}, "not max retries 1")
	other := job.New[Order]("order.other")
	mustFail(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, other, 1) }, "none of the type was enqueued")

	e.Reset()
	if len(e.Jobs()) != 0 {
		t.Errorf("Jobs after Reset: %v", e.Jobs())
	}
}

// The recorder refuses what the broker refuses: an id pending in its
// queue (the very envelope enqueued again too: another call), an invalid
// envelope (the whole batch), and what Fail refuses; Cancel removes a
// pending job, after which its id is free again.
func TestEnqueuerRefusesAsTheBrokerDoes(t *testing.T) {
	t.Parallel()
	e := &delayqtest.Enqueuer{}
	env, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "1"}, job.ID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "another"}, job.ID("order-1")); !errors.Is(err, broker.ErrDuplicate) || !strings.Contains(err.Error(), `id "order-1" in queue "orders"`) {
		t.Errorf("second job with a pending id: %v, want broker.ErrDuplicate naming it", err)
	}
	if err := e.Enqueue(ctx, env); !errors.Is(err, broker.ErrDuplicate) {
		t.Errorf("the very envelope enqueued again: %v, want broker.ErrDuplicate", err)
	}
	if n := len(e.Jobs()); n != 1 {
		t.Errorf("%d jobs recorded, want 1", n)
	}

	bad := []*job.Envelope{{Type: "order.cancel_unpaid", ID: "ok"}, {Type: "order.cancel_unpaid", Queue: "no space"}}
	if err := e.Enqueue(ctx, bad...); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), `job 2 of 2`) || !strings.Contains(err.Error(), `queue name "no space"`) {
		t.Errorf("batch with an invalid envelope: %v", err)
	}
	if err := e.Enqueue(ctx, &job.Envelope{Type: "x", MaxRetries: -1}); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "max retries -1") {
		t.Errorf("negative retries: %v", err)
	}
	if n := len(e.Jobs()); n != 1 {
		t.Errorf("%d jobs recorded after refused batches, want 1", n)
	}

	down := errors.New("redis down")
	e.Fail = func(env *job.Envelope) error {
		if env.ID == "order-3" {
			return down
		}
		return nil
	}
	envs, err := cancelUnpaid.EnqueueItems(ctx, e, testkit.Items([]Order{{ID: "2"}, {ID: "3"}}))
	if err != nil {
		t.Fatal(err)
	}
	e.Reset()
	envs[0].ID, envs[1].ID = "order-2", "order-3"
	var be *job.BatchError
	if err := e.Enqueue(ctx, envs...); !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], down) {
		t.Errorf("batch with a refused job: %v", err)
	}
	mustPass(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasID("order-2")) })
	mustPass(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 0, delayqtest.HasID("order-3")) })

	if _, err := e.Cancel(ctx, "orders", "order-2"); err != nil {
		t.Errorf("Cancel of a pending job: %v", err)
	}
	if _, err := e.Cancel(ctx, "orders", "order-2"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("second Cancel: %v, want broker.ErrNotFound", err)
	}
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasID("order-2"), delayqtest.Cancelled())
	})
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasID("order-2"), delayqtest.Pending())
	}, "(cancelled) — not pending")
	if _, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "2"}, job.ID("order-2")); err != nil {
		t.Errorf("enqueue after cancel: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.Enqueue(cctx, &job.Envelope{Type: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

// A recorded payload that the type cannot decode fails the test that
// reads it, naming the job.
func TestEnqueuerUndecodablePayload(t *testing.T) {
	t.Parallel()
	e := &delayqtest.Enqueuer{}
	if err := e.Enqueue(ctx, &job.Envelope{Type: cancelUnpaid.Name(), ID: "bad", Payload: []byte(`"not an object"`)}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1) }, `recorded job order.cancel_unpaid "bad"`, "does not decode")
	if _, err := delayqtest.Decode(cancelUnpaid, &job.Envelope{Payload: []byte(`{"id":"5"}`)}); err != nil {
		t.Errorf("Decode: %v", err)
	}
}

// The recorder is safe for concurrent use.
func TestEnqueuerConcurrent(t *testing.T) {
	t.Parallel()
	e := &delayqtest.Enqueuer{}
	done := make(chan error, 50)
	for i := range 50 {
		go func() {
			_, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: fmt.Sprint(i)})
			done <- err
		}()
	}
	for range 50 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	mustPass(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 50) })
}

// job.Replace replaces a pending job, as the broker does: the old record
// is marked Replaced, the new one is pending; a duplicate without Replace
// is a *broker.DuplicateError naming the job. ExpiresIn checks the expiry.
func TestEnqueuerReplaceAndExpiry(t *testing.T) {
	t.Parallel()
	e := &delayqtest.Enqueuer{Now: fixedClock}
	if _, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "1"}, job.ID("order-1"), job.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "1 again"}, job.ID("order-1"))
	var dup *broker.DuplicateError
	if !errors.As(err, &dup) || dup.ID != "order-1" || dup.Queue != "orders" {
		t.Errorf("duplicate: %v, want a *broker.DuplicateError naming order-1", err)
	}
	if _, err := cancelUnpaid.Enqueue(ctx, e, Order{ID: "1"}, job.ID("order-1"), job.At(epoch.Add(2*time.Hour)), job.Replace(), job.ExpireAt(epoch.Add(3*time.Hour))); err != nil {
		t.Fatal(err)
	}
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasID("order-1"), delayqtest.Pending(), delayqtest.ReadyIn(2*time.Hour, 0), delayqtest.ExpiresIn(3*time.Hour, time.Second))
	})
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.HasID("order-1"), delayqtest.Replaced(), delayqtest.ReadyIn(time.Hour, 0))
	})
	mustFail(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, cancelUnpaid, 1, delayqtest.ExpiresIn(time.Hour, time.Second))
	}, "(replaced) — not expires in 1h0m0s (±1s)", "not expires in 1h0m0s")
}

// A job.Unique job without an id gets the id the broker derives from its
// type and arguments, so the same arguments make the same (pending) job.
func TestEnqueuerUniqueDerivesID(t *testing.T) {
	t.Parallel()
	remind := job.New[Order]("order.remind", job.Unique(time.Hour))
	e := &delayqtest.Enqueuer{Now: fixedClock} // the same creation time: still two calls
	env, err := remind.Enqueue(ctx, e, Order{ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := naming.UniqueID("order.remind", env.Payload); env.ID != want {
		t.Errorf("id %q, want the derived %q", env.ID, want)
	}
	if _, err := remind.Enqueue(ctx, e, Order{ID: "1"}); !errors.Is(err, broker.ErrDuplicate) {
		t.Errorf("the same arguments again: %v, want broker.ErrDuplicate", err)
	}
	if _, err := remind.Enqueue(ctx, e, Order{ID: "2"}); err != nil {
		t.Errorf("other arguments: %v", err)
	}
	mustPass(t, func(tb testing.TB) { delayqtest.RequireEnqueuedN(tb, e, remind, 2) })
}

// The kit debounces by its own clock, row by row of
// docs/flow-control.md#debounce: a job in its window is replaced and ready
// the window after now; a due one gets the newest arguments and keeps its
// ready time however many enqueues come; a running one (Claim) is refused
// with ErrInProgress and left alone; once it ended (End) the key stores a
// new job. The replaced jobs are recorded as such.
func TestEnqueuerDebounces(t *testing.T) {
	t.Parallel()
	const window = 30 * time.Second
	clock := epoch
	e := &delayqtest.Enqueuer{Now: func() time.Time { return clock }}
	digest := job.New[Order]("notify.digest")
	send := func(args string) (*job.Envelope, error) {
		return digest.Enqueue(ctx, e, Order{ID: args}, job.Debounce("u7", window))
	}
	env, err := send("1")
	if err != nil || !env.ReadyAt.Equal(epoch.Add(window)) {
		t.Fatalf("nothing pending: %v, ready %v; want nil, ready at %v", err, env.ReadyAt, epoch.Add(window))
	}
	clock = clock.Add(10 * time.Second)
	env, err = send("2")
	if err != nil || !env.ReadyAt.Equal(clock.Add(window)) {
		t.Fatalf("in the window: %v, ready %v; want nil, ready at %v", err, env.ReadyAt, clock.Add(window))
	}
	ready := env.ReadyAt
	// At the very ms of its ready time the job is due, as on the broker.
	clock = ready
	for _, args := range []string{"3", "4"} {
		env, err = send(args)
		if err != nil || !env.ReadyAt.Equal(ready) {
			t.Fatalf("due: %v, ready %v; want nil, its ready time %v kept", err, env.ReadyAt, ready)
		}
		clock = clock.Add(time.Minute)
	}
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, digest, 1, delayqtest.Pending(), delayqtest.HasID("u7"), delayqtest.HasArgs(Order{ID: "4"}), delayqtest.ReadyAt(ready, 0))
		delayqtest.RequireEnqueuedN(tb, e, digest, 3, delayqtest.Replaced())
	})

	if err := e.Claim(naming.DefaultQueue, "u7"); err != nil {
		t.Fatal(err)
	}
	if err := e.Claim(naming.DefaultQueue, "u7"); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Claim of a running job: %v, want ErrInProgress", err)
	}
	if _, err := send("5"); !errors.Is(err, broker.ErrInProgress) || !strings.Contains(err.Error(), `"u7"`) {
		t.Fatalf("running: %v, want ErrInProgress naming the id", err)
	}
	if _, err := digest.Reschedule(ctx, e, "u7", time.Time{}); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Reschedule of a running job: %v, want ErrInProgress", err)
	}
	if j, err := digest.Lookup(ctx, e, "u7"); err != nil || j.State != job.StateProcessing {
		t.Fatalf("Lookup of a running job: %+v, %v", j, err)
	}
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, digest, 0, delayqtest.HasArgs(Order{ID: "5"}))
	})
	if jobs := e.Jobs(); !jobs[len(jobs)-1].Running || jobs[len(jobs)-1].Replaced || jobs[len(jobs)-1].StopAsked {
		t.Fatalf("the claimed job: %+v, want it running, not replaced, not asked to stop", jobs[len(jobs)-1])
	}
	// A cancel asks the running job to stop; it runs on until End.
	if c, err := digest.Cancel(ctx, e, "u7"); err != nil || !c.Running {
		t.Fatalf("Cancel of a running job: %+v, %v; want it asked to stop", c, err)
	}
	if jobs := e.Jobs(); !jobs[len(jobs)-1].Running || !jobs[len(jobs)-1].StopAsked || jobs[len(jobs)-1].Cancelled {
		t.Fatalf("the job asked to stop: %+v, want it running and asked to stop", jobs[len(jobs)-1])
	}

	if err := e.End(naming.DefaultQueue, "u7"); err != nil {
		t.Fatal(err)
	}
	if err := e.End(naming.DefaultQueue, "u7"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("End of an ended job: %v, want ErrNotFound", err)
	}
	env, err = send("6")
	if err != nil || !env.ReadyAt.Equal(clock.Add(window)) {
		t.Fatalf("ended: %v, ready %v; want a new job ready at %v", err, env.ReadyAt, clock.Add(window))
	}
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, digest, 1, delayqtest.Pending(), delayqtest.HasArgs(Order{ID: "6"}))
	})
	// A job enqueued without a delay is due at once: a debounced enqueue
	// keeps its ready time, as the broker's does.
	plain := job.New[Order]("notify.plain")
	now, err := plain.Enqueue(ctx, e, Order{ID: "7"}, job.ID("p1"))
	if err != nil {
		t.Fatal(err)
	}
	if env, err := plain.Enqueue(ctx, e, Order{ID: "8"}, job.Debounce("p1", window)); err != nil || !env.ReadyAt.Equal(now.ReadyAt) {
		t.Fatalf("a job due at once: %v, ready %v; want %v kept", err, env.ReadyAt, now.ReadyAt)
	}
}

// Debounced jobs of one key in one call each act on the one before: all
// are accepted, one job is left with the last one's arguments, ready the
// window after now. What debounce cannot be combined with is refused and
// nothing is recorded.
func TestEnqueuerDebounceInOneCallAndRefusals(t *testing.T) {
	t.Parallel()
	const window = time.Minute
	e := &delayqtest.Enqueuer{Now: fixedClock}
	digest := job.New[Order]("notify.digest")
	var envs []*job.Envelope
	for i := range 5 {
		env, err := digest.Envelope(Order{ID: fmt.Sprint(i)}, job.Debounce("k", window))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	if err := e.Enqueue(ctx, envs...); err != nil {
		t.Fatalf("one key five times in one call: %v", err)
	}
	mustPass(t, func(tb testing.TB) {
		delayqtest.RequireEnqueuedN(tb, e, digest, 1, delayqtest.Pending(), delayqtest.HasArgs(Order{ID: "4"}), delayqtest.ReadyAt(epoch.Add(window), 0))
		delayqtest.RequireEnqueuedN(tb, e, digest, 4, delayqtest.Replaced())
	})
	e.Reset()
	refused := map[string]func() error{
		"Unique": func() error {
			_, err := digest.Enqueue(ctx, e, Order{}, job.Debounce("k", window), job.Unique(time.Hour))
			return err
		},
		"Replace": func() error {
			_, err := digest.Enqueue(ctx, e, Order{}, job.Debounce("k", window), job.Replace())
			return err
		},
		"In": func() error {
			_, err := digest.Enqueue(ctx, e, Order{}, job.Debounce("k", window), job.In(time.Hour))
			return err
		},
		"another ID": func() error {
			_, err := digest.Enqueue(ctx, e, Order{}, job.Debounce("k", window), job.ID("j"))
			return err
		},
		"EnqueueItems with one key": func() error {
			_, err := digest.EnqueueItems(ctx, e, testkit.Items([]Order{{}, {}}, job.Debounce("k", window)))
			return err
		},
		"an envelope with At": func() error {
			return e.Enqueue(ctx, &job.Envelope{Type: "t", ID: "k", Debounce: window, At: epoch.Add(time.Hour)})
		},
		"a batch member": func() error {
			return e.Enqueue(ctx, &job.Envelope{Type: "t", ID: "k", Debounce: window, Batch: "b"})
		},
		"no id": func() error {
			return e.Enqueue(ctx, &job.Envelope{Type: "t", Debounce: window})
		},
	}
	for name, do := range refused {
		if err := do(); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("Debounce with %s: %v, want ErrInvalid", name, err)
		}
	}
	if n := len(e.Jobs()); n != 0 {
		t.Fatalf("refused enqueues recorded %d jobs", n)
	}
}
