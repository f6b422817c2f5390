package sqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// The order and its timeout commit together; the relay moves the job to
// Redis with every option the producer gave, and empties the outbox.
func TestCommittedJobReachesRedis(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		var env *job.Envelope
		tb.inTx(t, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(tb.ctx, "INSERT INTO orders (id, state) VALUES ("+tb.param(1)+", 'open')", "1001"); err != nil {
				return err
			}
			var err error
			env, err = outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "1001"},
				job.ID("order-1001"), job.In(time.Hour), job.Header("tenant", "acme"),
				job.WithBackoff(retry.Exponential{Initial: time.Second, Multiplier: 2, Max: time.Minute}))
			return err
		})
		if env.ID != "order-1001" || env.Queue != "orders" || env.CreatedAt.IsZero() {
			t.Errorf("envelope after Enqueue: %+v", env)
		}
		if d := time.Until(env.ReadyAt); d < 59*time.Minute || d > 61*time.Minute {
			t.Errorf("ReadyAt %v is %v away, want an hour", env.ReadyAt, d)
		}
		if l := tb.lag(t); l.Pending != 1 || l.Failed != 0 {
			t.Errorf("lag before the relay: %+v, want 1 pending", l)
		}
		if tb.redisJob(t, "orders", "order-1001") != nil {
			t.Fatal("the job is in Redis before any relay ran")
		}

		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.waitEmpty(t, 10*time.Second)
		info := tb.redisJob(t, "orders", "order-1001")
		if info == nil {
			t.Fatal("the committed job is not in Redis")
		}
		got := info.Envelope
		if got.Type != "order.cancel_unpaid" || string(got.Payload) != `{"id":"1001"}` || got.MaxRetries != 3 ||
			got.Headers["tenant"] != "acme" || got.Backoff == nil || got.Backoff.Max != time.Minute ||
			!got.CreatedAt.Equal(env.CreatedAt.Truncate(time.Millisecond)) {
			t.Errorf("Redis holds %+v, want the envelope the producer gave (%+v)", got, env)
		}
		if d := info.ReadyAt.Sub(env.ReadyAt); d < -50*time.Millisecond || d > time.Second {
			t.Errorf("Redis ready time %v differs from the outbox's %v by %v", info.ReadyAt, env.ReadyAt, d)
		}
		stop() // Run has returned: every committed batch is counted
		if s := r.Stats(); s.Enqueued != 1 || s.Duplicates != 0 || s.Failed != 0 {
			t.Errorf("stats %+v, want 1 enqueued", s)
		}
	})
}

// A rolled-back transaction leaves nothing: not in the outbox, not in Redis.
func TestRolledBackJobNeverReachesRedis(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		tx, err := tb.db.BeginTx(tb.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "1"}, job.ID("order-1")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		// A later committed job shows that the relay ran past the point.
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "2"}, job.ID("order-2"))
			return err
		})
		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.waitEmpty(t, 10*time.Second)
		if tb.redisJob(t, "orders", "order-2") == nil {
			t.Fatal("the committed job is not in Redis")
		}
		if tb.redisJob(t, "orders", "order-1") != nil {
			t.Error("the rolled-back job is in Redis")
		}
		stop() // Run has returned: every committed batch is counted
		if s := r.Stats(); s.Enqueued != 1 {
			t.Errorf("stats %+v, want exactly 1 enqueued", s)
		}
	})
}

// A delay counts from Enqueue, on the database's clock: a relay that runs
// late does not delay the job further.
func TestDelayCountsFromEnqueue(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		const delay, late = 3 * time.Second, 1500 * time.Millisecond
		var env *job.Envelope
		enqueued := time.Now()
		tb.inTx(t, func(tx *sql.Tx) error {
			var err error
			env, err = outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "7"}, job.ID("order-7"), job.In(delay))
			return err
		})
		time.Sleep(late)
		tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.waitEmpty(t, 10*time.Second)
		info := tb.redisJob(t, "orders", "order-7")
		if info == nil {
			t.Fatal("job not in Redis")
		}
		want := enqueued.Add(delay)
		// Bounds well inside the relay's lateness, for a busy machine.
		if d := info.ReadyAt.Sub(want); d < -100*time.Millisecond || d > late*2/3 {
			t.Errorf("ready in Redis at %v, %v from enqueue time + delay (the relay ran %v late)", info.ReadyAt, d, late)
		}
		if d := info.ReadyAt.Sub(env.ReadyAt); d < -50*time.Millisecond || d > late*2/3 {
			t.Errorf("ready in Redis at %v, the outbox said %v", info.ReadyAt, env.ReadyAt)
		}
	})
}

// job.At is kept as given.
func TestAtIsAbsolute(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		at := time.Now().Add(45 * time.Minute).Truncate(time.Millisecond)
		var env *job.Envelope
		tb.inTx(t, func(tx *sql.Tx) error {
			var err error
			env, err = outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "8"}, job.ID("order-8"), job.At(at))
			return err
		})
		if !env.ReadyAt.Equal(at) {
			t.Errorf("ReadyAt %v, want %v", env.ReadyAt, at)
		}
		tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.waitEmpty(t, 10*time.Second)
		info := tb.redisJob(t, "orders", "order-8")
		if info == nil {
			t.Fatal("job not in Redis")
		}
		if d := info.ReadyAt.Sub(at); d < -50*time.Millisecond || d > 500*time.Millisecond {
			t.Errorf("ready in Redis at %v, want %v", info.ReadyAt, at)
		}
	})
}

// Bad input is refused with an error naming it, and nothing is written.
func TestEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		valid := func() *job.Envelope {
			return &job.Envelope{ID: "ok-1", Queue: "orders", Type: "order.cancel_unpaid", Payload: []byte(`{}`)}
		}
		cases := []struct {
			name string
			env  func() *job.Envelope
			want string
		}{
			{"nil envelope", func() *job.Envelope { return nil }, "nil envelope"},
			{"bad id", func() *job.Envelope { e := valid(); e.ID = "a{b}"; return e }, "id"},
			{"bad queue", func() *job.Envelope { e := valid(); e.Queue = "or ders"; return e }, "queue name"},
			{"no type", func() *job.Envelope { e := valid(); e.Type = ""; return e }, "job type"},
			{"negative delay", func() *job.Envelope { e := valid(); e.Delay = -time.Second; return e }, "delay"},
			{"negative retries", func() *job.Envelope { e := valid(); e.MaxRetries = -1; return e }, "max retries"},
			{"negative timeout", func() *job.Envelope { e := valid(); e.Timeout = -time.Second; return e }, "timeout"},
			{"bad backoff", func() *job.Envelope { e := valid(); e.Backoff = &job.Backoff{}; return e }, "invalid"},
			{"bad header", func() *job.Envelope { e := valid(); e.Headers = map[string]string{"": "x"}; return e }, "header key"},
			{"payload too large", func() *job.Envelope {
				e := valid()
				e.Payload = make([]byte, 1<<20+1)
				return e
			}, "payload of job"},
		}
		tb.inTx(t, func(tx *sql.Tx) error {
			for _, c := range cases {
				err := tb.ob.Enqueue(tb.ctx, tx, c.env())
				if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: got %v, want an error wrapping job.ErrInvalid that names %q", c.name, err, c.want)
				}
			}
			if err := tb.ob.Enqueue(tb.ctx, nil, valid()); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "nil transaction") {
				t.Errorf("nil tx: %v", err)
			}
			if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{}, job.ID("")); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("empty job.ID: %v", err)
			}
			if _, err := outbox.EnqueueTyped[Order](tb.ctx, tb.ob, tx, nil, Order{}); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("nil type: %v", err)
			}
			for _, c := range []struct{ queue, id, want string }{{"or ders", "x", "queue name"}, {"orders", "", "id"}} {
				if _, err := tb.ob.Cancel(tb.ctx, tx, c.queue, c.id); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("Cancel(%q, %q): %v", c.queue, c.id, err)
				}
			}
			if _, err := tb.ob.Cancel(tb.ctx, nil, "orders", "x"); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("Cancel with nil tx: %v", err)
			}
			return nil
		})
		if l := tb.lag(t); l.Pending != 0 || l.Failed != 0 {
			t.Errorf("refused input left rows: %+v", l)
		}
	})
}

// A debounced job is refused at Enqueue, with an error naming the
// conflict (the relay's Unique and ready time), before anything is
// written: the broker would refuse it when the relay moved the row. The
// transaction goes on: a job written after the refusal is the only row.
func TestEnqueueRefusesDebounce(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		tb.inTx(t, func(tx *sql.Tx) error {
			env := &job.Envelope{ID: "digest-u7", Queue: "orders", Type: "notify.digest", Payload: []byte(`{}`), Debounce: time.Minute}
			for name, err := range map[string]error{
				"Enqueue": tb.ob.Enqueue(tb.ctx, tx, env),
				"EnqueueTyped": func() error {
					_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "1"}, job.Debounce("order-1", time.Minute))
					return err
				}(),
			} {
				if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "Debounce") || !strings.Contains(err.Error(), "job.Unique") {
					t.Errorf("%s of a debounced job: %v, want an error wrapping job.ErrInvalid that names Debounce and the relay's job.Unique", name, err)
				}
			}
			if !env.ReadyAt.IsZero() || !env.CreatedAt.IsZero() {
				t.Errorf("the refused envelope was filled in: %+v", env)
			}
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "2"}, job.ID("order-2"))
			return err
		})
		if l := tb.lag(t); l.Pending != 1 || l.Failed != 0 {
			t.Errorf("after the refusals and one job: %+v, want the one job's row alone", l)
		}
	})
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, "sqlite")
	for _, c := range []struct {
		name string
		db   *sql.DB
		d    outbox.Dialect
		opts outbox.Options
		want string
	}{
		{"nil db", nil, outbox.SQLite(), outbox.Options{}, "nil *sql.DB"},
		{"no dialect", db, outbox.Dialect{}, outbox.Options{}, "no dialect"},
		{"table with a space", db, outbox.SQLite(), outbox.Options{Table: "out box"}, `table name "out box" contains ' '`},
		{"table with a quote", db, outbox.SQLite(), outbox.Options{Table: `x";DROP`}, "table name"},
		{"leading digit", db, outbox.SQLite(), outbox.Options{Table: "1outbox"}, "table name"},
		{"empty schema", db, outbox.SQLite(), outbox.Options{Table: ".outbox"}, "schema name"},
		{"three parts", db, outbox.SQLite(), outbox.Options{Table: "a.b.c"}, "table name"},
		{"too long", db, outbox.SQLite(), outbox.Options{Table: strings.Repeat("t", 55)}, "the limit is 54"},
	} {
		_, err := outbox.New(c.db, c.d, c.opts)
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error wrapping job.ErrInvalid containing %q", c.name, err, c.want)
		}
	}
	ob, err := outbox.New(db, outbox.SQLite(), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ob   *outbox.Outbox
		b    outbox.Broker
		opts outbox.RelayOptions
		want string
	}{
		{"nil outbox", nil, b, outbox.RelayOptions{}, "nil Outbox"},
		{"nil broker", ob, nil, outbox.RelayOptions{}, "nil Broker"},
		{"batch too large", ob, b, outbox.RelayOptions{BatchSize: 10_001}, "batch size"},
		{"negative poll", ob, b, outbox.RelayOptions{PollInterval: -1}, "must not be negative"},
		{"backoff upside down", ob, b, outbox.RelayOptions{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
	} {
		_, err := outbox.NewRelay(c.ob, c.b, c.opts)
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error wrapping job.ErrInvalid containing %q", c.name, err, c.want)
		}
	}
}

// Migrate is idempotent, and a configured (schema-qualified) table is used
// by every statement.
func TestMigrateAndTableName(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		if err := tb.ob.Migrate(tb.ctx); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		table := "main.app_jobs"
		if tb.dialect == "postgres" {
			if _, err := tb.db.ExecContext(tb.ctx, "CREATE SCHEMA jobs"); err != nil {
				t.Fatal(err)
			}
			table = "jobs.app_jobs"
		}
		ob, err := outbox.New(tb.db, tb.d, outbox.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if ddl := strings.Join(ob.Schema(), "\n"); !strings.Contains(ddl, table) {
			t.Errorf("Schema() does not name %s:\n%s", table, ddl)
		}
		if err := ob.Migrate(tb.ctx); err != nil {
			t.Fatal(err)
		}
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, ob, tx, cancelUnpaid, Order{ID: "3"}, job.ID("order-3"))
			return err
		})
		var n int
		if err := tb.db.QueryRowContext(tb.ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil || n != 1 {
			t.Fatalf("rows in %s: %d, %v", table, n, err)
		}
		if l := tb.lag(t); l.Pending != 0 {
			t.Errorf("the default table got the row: %+v", l)
		}
		r, err := outbox.NewRelay(ob, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(tb.ctx)
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		redistest.WaitFor(t, 10*time.Second, "job relayed from "+table, func() bool {
			l, err := ob.Lag(tb.ctx)
			return err == nil && l.Pending == 0
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if tb.redisJob(t, "orders", "order-3") == nil {
			t.Error("job not in Redis")
		}
		if len(ob.Schema()) != 2 || !strings.Contains(ob.Schema()[0], table) {
			t.Errorf("Schema() = %q", ob.Schema())
		}
	})
}

// Cancel before the job was relayed: the row goes, the job never reaches
// Redis and never runs.
func TestCancelBeforeRelay(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "5"}, job.ID("order-5"), job.In(300*time.Millisecond))
			return err
		})
		tb.inTx(t, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(tb.ctx, "INSERT INTO orders (id, state) VALUES ("+tb.param(1)+", 'paid')", "5"); err != nil {
				return err
			}
			removed, err := tb.ob.Cancel(tb.ctx, tx, "orders", "order-5")
			if err == nil && !removed {
				t.Error("Cancel did not find the job in the outbox")
			}
			return err
		})
		ran := runWorker(t, tb)
		var mu sync.Mutex
		var outcomes []error
		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond, OnCancel: func(q, id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if q == "orders" && id == "order-5" {
				outcomes = append(outcomes, err)
			}
		}})
		tb.waitEmpty(t, 10*time.Second)
		time.Sleep(time.Second) // past the job's ready time
		if tb.redisJob(t, "orders", "order-5") != nil {
			t.Error("the cancelled job reached Redis")
		}
		if n := ran(); n != 0 {
			t.Errorf("the cancelled job ran %d times", n)
		}
		stop() // Run has returned: every committed batch is counted
		s := r.Stats()
		if s.Enqueued != 0 || s.NotFound != 1 {
			t.Errorf("stats %+v, want nothing enqueued and one cancel that found nothing in Redis", s)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(outcomes) != 1 || !errors.Is(outcomes[0], broker.ErrNotFound) {
			t.Errorf("OnCancel saw %v, want one ErrNotFound", outcomes)
		}
	})
}

// Cancel after the job was relayed: the job is in Redis, the cancel
// commits, the relay applies it, the job is gone and never runs.
func TestCancelAfterRelay(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		var mu sync.Mutex
		var outcomes []error
		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond, OnCancel: func(_, _ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, err)
		}})
		ran := runWorker(t, tb)
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "6"}, job.ID("order-6"), job.In(time.Second))
			return err
		})
		r.Notify()
		redistest.WaitFor(t, 5*time.Second, "job relayed", func() bool { return tb.redisJob(t, "orders", "order-6") != nil })
		tb.waitEmpty(t, 5*time.Second) // the relay commits after Redis took the job
		tb.inTx(t, func(tx *sql.Tx) error {
			removed, err := tb.ob.Cancel(tb.ctx, tx, "orders", "order-6")
			if err == nil && removed {
				t.Error("Cancel found the relayed job in the outbox")
			}
			return err
		})
		r.Notify()
		redistest.WaitFor(t, 5*time.Second, "cancel applied", func() bool { return tb.redisJob(t, "orders", "order-6") == nil })
		tb.waitEmpty(t, 5*time.Second)
		time.Sleep(1500 * time.Millisecond) // past the job's ready time
		if n := ran(); n != 0 {
			t.Errorf("the cancelled job ran %d times", n)
		}
		stop() // Run has returned: every committed batch is counted
		if s := r.Stats(); s.Enqueued != 1 || s.Cancelled != 1 {
			t.Errorf("stats %+v, want 1 enqueued and 1 cancelled", s)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(outcomes) != 1 || outcomes[0] != nil {
			t.Errorf("OnCancel saw %v, want one nil", outcomes)
		}
	})
}

// A cancel that comes while a worker holds the job is recorded as such,
// once, and not retried.
func TestCancelInProgress(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "9"}, job.ID("order-9"))
			return err
		})
		r.Notify()
		var res protocol.ClaimResult
		redistest.WaitFor(t, 5*time.Second, "job claimed", func() bool {
			var err error
			res, err = testkit.Drive(tb.b).Claim(tb.ctx, "orders", 1, time.Minute)
			return err == nil && len(res.Jobs) == 1
		})
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := tb.ob.Cancel(tb.ctx, tx, "orders", "order-9")
			return err
		})
		r.Notify()
		tb.waitEmpty(t, 5*time.Second)
		stop() // Run has returned: every committed batch is counted
		if s := r.Stats(); s.InProgress != 1 || s.Errors != 0 {
			t.Errorf("stats %+v, want one cancel in progress and no errors", s)
		}
		if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease); err != nil {
			t.Errorf("the worker's lease was disturbed: %v", err)
		}
	})
}

// A rolled-back cancel changes nothing.
func TestCancelRolledBack(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "4"}, job.ID("order-4"), job.In(time.Hour))
			return err
		})
		tx, err := tb.db.BeginTx(tb.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tb.ob.Cancel(tb.ctx, tx, "orders", "order-4"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.waitEmpty(t, 10*time.Second)
		if tb.redisJob(t, "orders", "order-4") == nil {
			t.Error("the job whose cancel rolled back is not in Redis")
		}
		stop() // Run has returned: every committed batch is counted
		if s := r.Stats(); s.Enqueued != 1 || s.Cancelled+s.NotFound != 0 {
			t.Errorf("stats %+v", s)
		}
	})
}

// Cancel and enqueue of one id in one transaction reschedule it: the
// relay applies them in order, even with several relays.
func TestRescheduleInOneTransaction(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		relays := 1
		if tb.dialect == "postgres" {
			relays = 3
		}
		var rs []*outbox.Relay
		var stops []func()
		for range relays {
			r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 5 * time.Millisecond, BatchSize: 1})
			rs, stops = append(rs, r), append(stops, stop)
		}
		const n = 20
		for i := range n {
			tb.inTx(t, func(tx *sql.Tx) error {
				_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(fmt.Sprintf("order-%d", i)), job.In(time.Hour))
				return err
			})
		}
		tb.waitEmpty(t, 10*time.Second)
		for i := range n {
			tb.inTx(t, func(tx *sql.Tx) error {
				id := fmt.Sprintf("order-%d", i)
				if _, err := tb.ob.Cancel(tb.ctx, tx, "orders", id); err != nil {
					return err
				}
				_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(id), job.In(2*time.Hour))
				return err
			})
		}
		tb.waitEmpty(t, 10*time.Second)
		for i := range n {
			info := tb.redisJob(t, "orders", fmt.Sprintf("order-%d", i))
			if info == nil {
				t.Errorf("order-%d is not in Redis after its reschedule", i)
				continue
			}
			if d := time.Until(info.ReadyAt); d < 119*time.Minute {
				t.Errorf("order-%d is ready in %v: the reschedule was lost", i, d)
			}
		}
		var total outbox.RelayStats
		for _, stop := range stops {
			stop() // Run has returned: every committed batch is counted
		}
		for _, r := range rs {
			s := r.Stats()
			total.Enqueued += s.Enqueued
			total.Duplicates += s.Duplicates
			total.Cancelled += s.Cancelled
		}
		if total.Enqueued != 2*n || total.Duplicates != 0 || total.Cancelled != n {
			t.Errorf("relays did %+v, want %d enqueued, %d cancelled, no duplicate", total, 2*n, n)
		}
	})
}

// A replay (the relay stored the job, then crashed before deleting the
// row) is a no-op: ErrDuplicate counts as relayed, the job stays as it was.
func TestReplayIsNoOp(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		if _, err := cancelUnpaid.Enqueue(tb.ctx, tb.b, Order{ID: "11"}, job.ID("order-11"), job.In(time.Hour)); err != nil {
			t.Fatal(err)
		}
		before := tb.redisJob(t, "orders", "order-11")
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "11"}, job.ID("order-11"), job.In(3*time.Hour))
			return err
		})
		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.waitEmpty(t, 10*time.Second)
		after := tb.redisJob(t, "orders", "order-11")
		if after == nil || !after.ReadyAt.Equal(before.ReadyAt) || string(after.Body) != string(before.Body) {
			t.Errorf("the replay changed the job: before %+v, after %+v", before, after)
		}
		stop() // Run has returned: every committed batch is counted
		if s := r.Stats(); s.Duplicates != 1 || s.Enqueued != 0 {
			t.Errorf("stats %+v, want one duplicate", s)
		}
	})
}

// A row that cannot be relayed (corrupt, or over the broker's payload cap)
// is marked failed, counted and skipped; the rest of the batch goes on.
func TestUnrelayableRowsMarkedFailed(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		small, err := broker.New(tb.b.Client(), broker.Options{Namespace: tb.b.Namespace(), MaxPayloadBytes: 64})
		if err != nil {
			t.Fatal(err)
		}
		tb.inTx(t, func(tx *sql.Tx) error {
			for i := range 5 {
				if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(fmt.Sprintf("order-%d", i))); err != nil {
					return err
				}
			}
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: strings.Repeat("x", 100)}, job.ID("order-big"))
			return err
		})
		p := tb.param
		if _, err := tb.db.ExecContext(tb.ctx, "UPDATE delayq_outbox SET envelope = "+p(1)+" WHERE job_id = "+p(2), "{not json", "order-3"); err != nil {
			t.Fatal(err)
		}
		r, stop := tb.relay(t, small, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		redistest.WaitFor(t, 10*time.Second, "batch relayed", func() bool { l := tb.lag(t); return l.Pending == 0 && l.Failed == 2 })
		for _, id := range []string{"order-0", "order-1", "order-2", "order-4"} {
			if tb.redisJob(t, "orders", id) == nil {
				t.Errorf("%s is not in Redis", id)
			}
		}
		rows, err := tb.db.QueryContext(tb.ctx, "SELECT job_id, error FROM delayq_outbox ORDER BY job_id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]string{}
		for rows.Next() {
			var id, msg string
			if err := rows.Scan(&id, &msg); err != nil {
				t.Fatal(err)
			}
			got[id] = msg
		}
		if !strings.Contains(got["order-3"], "envelope does not decode") || !strings.Contains(got["order-big"], "payload too large") || len(got) != 2 {
			t.Errorf("failed rows: %q", got)
		}
		stop() // Run has returned: every committed batch is counted
		if s := r.Stats(); s.Enqueued != 4 || s.Failed != 2 {
			t.Errorf("stats %+v, want 4 enqueued, 2 failed", s)
		}
	})
}

// Notify wakes a relay that sleeps with a long poll interval.
func TestNotifyWakesRelay(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		r, _ := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: time.Hour})
		time.Sleep(100 * time.Millisecond) // let it find the outbox empty and sleep
		tb.inTx(t, func(tx *sql.Tx) error {
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "12"}, job.ID("order-12"))
			return err
		})
		r.Notify()
		tb.waitEmpty(t, 5*time.Second)
		if tb.redisJob(t, "orders", "order-12") == nil {
			t.Error("job not in Redis")
		}
	})
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	tb := setup(t, "sqlite")
	r, _ := tb.relay(t, tb.b, outbox.RelayOptions{})
	time.Sleep(50 * time.Millisecond)
	if err := r.Run(tb.ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run: %v", err)
	}
}

// runWorker handles cancelUnpaid jobs of tb's broker until the test ends,
// returning a counter of handlings.
func runWorker(t *testing.T, tb *testBundle) (handled func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	reg := job.NewRegistry()
	cancelUnpaid.Handle(reg, func(context.Context, *job.Job[Order]) error {
		mu.Lock()
		defer mu.Unlock()
		n++
		return nil
	})
	w, err := worker.New(worker.Options{Broker: tb.b, Registry: reg, Queues: []worker.Queue{{Name: "orders"}}, MaxIdle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// A replay after the job already ran is a no-op: the relay enqueues with
// the job's id and uniqueness after completion (RelayOptions.ReplayWindow),
// so the job's ack remembers the id, and the same row relayed again (the
// relay died after Redis accepted the batch and before the row's delete
// committed) is refused as a duplicate instead of running the job twice.
// Without the window the replay runs it again.
func TestReplayAfterJobRanIsNoOp(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		handled := runWorker(t, tb)
		for _, c := range []struct {
			name   string
			window time.Duration
			runs   int
		}{{"window", 0, 1}, {"no window", -1, 2}} {
			id := "order-" + strings.ReplaceAll(c.name, " ", "-")
			tb.inTx(t, func(tx *sql.Tx) error {
				_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: id}, job.ID(id))
				return err
			})
			// What a relay that crashes before its delete leaves behind.
			var row []any
			{
				var op, queue, jobID string
				var env sql.NullString
				var payload []byte
				var ready, created sql.NullInt64
				q := "SELECT op, queue, job_id, envelope, payload, ready_at, created_at FROM delayq_outbox WHERE job_id = " + tb.param(1)
				if err := tb.db.QueryRowContext(tb.ctx, q, id).Scan(&op, &queue, &jobID, &env, &payload, &ready, &created); err != nil {
					t.Fatal(err)
				}
				row = []any{op, queue, jobID, env, payload, ready, created}
			}
			base := handled()
			r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond, ReplayWindow: c.window})
			tb.waitEmpty(t, 10*time.Second)
			redistest.WaitFor(t, 10*time.Second, "the job handled and acked", func() bool {
				return handled() == base+1 && tb.redisJob(t, "orders", id) == nil
			})

			p := tb.param
			ins := fmt.Sprintf("INSERT INTO delayq_outbox (op, queue, job_id, envelope, payload, ready_at, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
				p(1), p(2), p(3), p(4), p(5), p(6), p(7))
			if _, err := tb.db.ExecContext(tb.ctx, ins, row...); err != nil {
				t.Fatal(err)
			}
			r.Notify()
			tb.waitEmpty(t, 10*time.Second)
			if c.runs == 2 {
				redistest.WaitFor(t, 10*time.Second, "the replayed job handled", func() bool { return handled() == base+2 })
			} else {
				time.Sleep(300 * time.Millisecond) // a worker that would run it has had the time
			}
			stop()
			s := r.Stats()
			if got := handled() - base; got != c.runs {
				t.Errorf("%s: the job ran %d times, want %d", c.name, got, c.runs)
			}
			if c.runs == 1 && (s.Enqueued != 1 || s.Duplicates != 1) {
				t.Errorf("%s: stats %+v, want 1 enqueued and the replay a duplicate", c.name, s)
			}
			if c.runs == 2 && s.Enqueued != 2 {
				t.Errorf("%s: stats %+v, want the replay enqueued again", c.name, s)
			}
		}
	})
}

// The relay runs inside a worker process as one of its services: it moves
// committed rows while the worker runs, the worker handles the jobs, and
// at shutdown the worker's Run returns only after the relay stopped
// (its status is removed, and it can be run again).
func TestRelayAsWorkerService(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		r, err := outbox.NewRelay(tb.ob, tb.b, outbox.RelayOptions{Name: "in-worker", PollInterval: 10 * time.Millisecond, StatusInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		handled := map[string]int{}
		reg := job.NewRegistry()
		cancelUnpaid.Handle(reg, func(_ context.Context, j *job.Job[Order]) error {
			mu.Lock()
			defer mu.Unlock()
			handled[j.Args.ID]++
			return nil
		})
		w, err := worker.New(worker.Options{Broker: tb.b, Registry: reg, MaxIdle: 50 * time.Millisecond, Services: []worker.Service{r}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()

		const n = 20
		tb.inTx(t, func(tx *sql.Tx) error {
			for i := range n {
				if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(fmt.Sprintf("order-%d", i))); err != nil {
					return err
				}
			}
			return nil
		})
		redistest.WaitFor(t, 20*time.Second, "every committed job relayed and handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == n
		})
		tb.waitEmpty(t, 10*time.Second)
		redistest.WaitFor(t, 10*time.Second, "the relay's status", func() bool { return relayStatus(t, tb.b, "in-worker") != nil })

		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("worker Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the worker did not stop")
		}
		if s := relayStatus(t, tb.b, "in-worker"); s != nil {
			t.Errorf("the relay's status is still listed after shutdown: %+v", s)
		}
		if s := r.Stats(); s.Enqueued != n {
			t.Errorf("stats %+v, want %d enqueued", s, n)
		}
		mu.Lock()
		defer mu.Unlock()
		for id, c := range handled {
			if c != 1 {
				t.Errorf("%s handled %d times", id, c)
			}
		}
		// Run returned: the relay can run again (a second Run while one
		// runs is refused).
		rctx, rcancel := context.WithCancel(context.Background())
		rcancel()
		if err := r.Run(rctx); err != nil {
			t.Errorf("Run after the worker stopped: %v", err)
		}
	})
}

// A job whose expiry passes while it waits in the outbox (Redis down, the
// relay behind) is deleted and counted, never enqueued: it could not run
// any more. One still in time is relayed with its expiry.
func TestExpiredInOutbox(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		tb.inTx(t, func(tx *sql.Tx) error {
			if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "1"}, job.ID("otp-late"), job.ExpireIn(50*time.Millisecond)); err != nil {
				return err
			}
			_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "2"}, job.ID("otp-fine"), job.ExpireIn(time.Hour))
			return err
		})
		time.Sleep(200 * time.Millisecond)
		r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		tb.waitEmpty(t, 10*time.Second)
		stop()
		if tb.redisJob(t, "orders", "otp-late") != nil {
			t.Error("the expired job reached Redis")
		}
		fine := tb.redisJob(t, "orders", "otp-fine")
		if fine == nil || fine.Envelope.ExpireAt.IsZero() {
			t.Errorf("the job in time: %+v, want it in Redis with its expiry", fine)
		}
		if s := r.Stats(); s.Expired != 1 || s.Enqueued != 1 || s.Failed != 0 {
			t.Errorf("stats %+v, want 1 expired, 1 enqueued, none failed", s)
		}
		if l := tb.lag(t); l.Failed != 0 {
			t.Errorf("lag %+v: the expired row was marked failed", l)
		}
	})
}
