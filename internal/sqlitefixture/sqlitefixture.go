// Package sqlitefixture runs outbox relays over SQLite for the tests of
// the CLI and the dashboard, which show the status relays record. It is a
// module of its own, so that the core module does not require an SQL
// driver. Tests only.
package sqlitefixture

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the relays' outboxes

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/relaystatus"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// DownBroker is a broker whose enqueues fail, as while Redis refuses
// writes; a relay's status still reaches Redis through the embedded
// broker.
type DownBroker struct{ *broker.Broker }

// Enqueue fails.
func (DownBroker) Enqueue(context.Context, ...*job.Envelope) error {
	return errors.New("enqueue refused (test)")
}

// StartRelay runs a relay named name, recording its status every 200 ms,
// over a new SQLite outbox holding one committed job per element of
// pending, through b (a DownBroker keeps them pending), until the test
// ends.
func StartRelay(t testing.TB, b outbox.Broker, name string, pending []*job.Envelope) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	ob, err := outbox.New(db, outbox.SQLite(), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, env := range pending {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Enqueue(ctx, tx, env); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	relay, err := outbox.NewRelay(ob, b, outbox.RelayOptions{Name: name, StatusInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
}

// WaitRelays waits until the relays' status of b's namespace satisfies cond,
// failing the test after 30 s.
func WaitRelays(t testing.TB, b *broker.Broker, cond func([]relaystatus.Status) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rs, err := relaystatus.Read(context.Background(), b.Client(), b.Namespace())
		if err != nil {
			t.Fatal(err)
		}
		if cond(rs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays not as expected within 30s: %+v", rs)
		}
	}
}
