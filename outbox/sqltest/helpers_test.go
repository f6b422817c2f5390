package sqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/pgtest"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

func TestMain(m *testing.M) { redistest.MainCleanup(m, pgtest.StopShared) }

// dialects are the databases every behavioural test runs on.
var dialects = []string{"postgres", "sqlite"}

// testBundle is what a test works with: a fresh database with the outbox
// table, a broker on its own namespace of the shared Redis, and the
// business table "orders".
type testBundle struct {
	ctx     context.Context
	dialect string
	d       outbox.Dialect // the one dialect names
	db      *sql.DB
	ob      *outbox.Outbox
	b       *broker.Broker
}

// forEach runs fn as a parallel subtest on each dialect.
func forEach(t *testing.T, fn func(t *testing.T, tb *testBundle)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			fn(t, setup(t, d))
		})
	}
}

// openDB returns a fresh database of dialect d, closed at cleanup.
func openDB(t testing.TB, d string) (*sql.DB, outbox.Dialect) {
	t.Helper()
	switch d {
	case "postgres":
		return pgtest.New(t), outbox.Postgres()
	case "sqlite":
		db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "app.db")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db, outbox.SQLite()
	}
	t.Fatalf("unknown dialect %q", d)
	return nil, outbox.Dialect{}
}

// sqliteDSN opens path in WAL mode, waiting up to 10s for the write lock,
// with transactions that take the write lock when they begin.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

func setup(t testing.TB, d string) *testBundle {
	t.Helper()
	db, dialect := openDB(t, d)
	tb := &testBundle{ctx: context.Background(), dialect: d, d: dialect, db: db}
	ob, err := outbox.New(db, dialect, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(tb.ctx); err != nil {
		t.Fatal(err)
	}
	tb.ob = ob
	if _, err := db.ExecContext(tb.ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	rdb, ns := redistest.New(t)
	if tb.b, err = broker.New(rdb, broker.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	return tb
}

// param is the dialect's placeholder of argument i.
func (tb *testBundle) param(i int) string {
	if tb.dialect == "postgres" {
		return "$" + string(rune('0'+i))
	}
	return "?"
}

// inTx runs fn in a transaction and commits it, failing the test on error.
func (tb *testBundle) inTx(t testing.TB, fn func(tx *sql.Tx) error) {
	t.Helper()
	tx, err := tb.db.BeginTx(tb.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// relay starts a relay of tb's outbox to b, stopped at cleanup (or by the
// returned stop, which waits for Run to return).
func (tb *testBundle) relay(t testing.TB, b outbox.Broker, opts outbox.RelayOptions) (*outbox.Relay, func()) {
	t.Helper()
	r, err := outbox.NewRelay(tb.ob, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return r, stop
}

// lag reads the outbox's lag.
func (tb *testBundle) lag(t testing.TB) outbox.Lag {
	t.Helper()
	l, err := tb.ob.Lag(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitEmpty waits until the outbox has no pending row.
func (tb *testBundle) waitEmpty(t testing.TB, timeout time.Duration) {
	t.Helper()
	redistest.WaitFor(t, timeout, "outbox empty", func() bool {
		l, err := tb.ob.Lag(tb.ctx)
		return err == nil && l.Pending == 0
	})
}

// redisJob returns the job id of queue as Redis holds it, or nil.
func (tb *testBundle) redisJob(t testing.TB, queue, id string) *job.JobInfo {
	t.Helper()
	info, err := tb.b.Job(tb.ctx, queue, id)
	if errors.Is(err, broker.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// Order is the payload of the tests' job type.
type Order struct {
	ID string `json:"id"`
}

var cancelUnpaid = job.New[Order]("order.cancel_unpaid", job.Queue("orders"), job.MaxRetries(3))
