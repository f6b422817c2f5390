package cli_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// downBroker is a broker whose enqueues fail, as while Redis refuses
// writes; its status still reaches Redis through the embedded broker.
type downBroker struct{ *broker.Broker }

func (downBroker) Enqueue(context.Context, ...*job.Envelope) error {
	return errors.New("enqueue refused (test)")
}

// startRelay runs a relay named name over a new SQLite outbox holding
// pending committed jobs, through b (a failing broker keeps them pending),
// until the test ends.
func startRelay(t *testing.T, b outbox.Broker, name string, pending int) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	ob, err := outbox.New(db, outbox.SQLite, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range pending {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.EnqueueTyped(ctx, ob, tx, digestType, digestArgs{Week: i}); err != nil {
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

// TestStatsShowsOutboxRelays: delayq stats lists each outbox relay that
// recorded its status: lag, pending, relayed, seen, and a failing one's
// last error; --json has them under outbox_relays.
func TestStatsShowsOutboxRelays(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if out := tb.ok(t, "stats"); strings.Contains(out, "OUTBOX RELAY") {
		t.Fatalf("stats shows relays before any ran:\n%s", out)
	}
	startRelay(t, tb.b, "billing-relay", 2)
	startRelay(t, downBroker{tb.b}, "orders-relay", 3)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs, err := outbox.Relays(tb.ctx, tb.rdb, tb.ns)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 2 && rs[0].Relayed == 2 && rs[0].Pending == 0 && rs[1].Pending == 3 && rs[1].Error != "" && rs[1].Lag > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays not as expected within 30s: %+v", rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := tb.ok(t, "stats")
	for _, want := range []string{
		"OUTBOX RELAY   TABLE",
		"billing-relay  delayq_outbox",
		"orders-relay   delayq_outbox",
		"failing: outbox: ",
		"enqueue refused (test)",
		"mail", // the relayed jobs' queue
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
	var js struct {
		Outbox []struct {
			Name      string  `json:"name"`
			LagMS     int64   `json:"lag_ms"`
			Pending   int64   `json:"pending"`
			Relayed   int64   `json:"relayed"`
			Seen      *string `json:"seen"`
			Stale     bool    `json:"stale"`
			LastError string  `json:"last_error"`
		} `json:"outbox_relays"`
	}
	tb.okJSON(t, &js, "stats")
	if len(js.Outbox) != 2 {
		t.Fatalf("stats --json: %+v, want two relays", js.Outbox)
	}
	bill, orders := js.Outbox[0], js.Outbox[1]
	if bill.Name != "billing-relay" || bill.Pending != 0 || bill.Relayed != 2 || bill.Stale || bill.LastError != "" || bill.Seen == nil {
		t.Errorf("billing-relay: %+v", bill)
	}
	if orders.Name != "orders-relay" || orders.Pending != 3 || orders.Relayed != 0 || orders.LagMS <= 0 || !strings.Contains(orders.LastError, "enqueue refused (test)") {
		t.Errorf("orders-relay: %+v", orders)
	}
}
