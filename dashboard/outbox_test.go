package dashboard_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
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
	for range pending {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.EnqueueTyped(ctx, ob, tx, reportType, reportArgs{Kind: "r"}); err != nil {
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

// The overview lists the outbox relays with their lag, pending and
// relayed rows, when last seen, and a failing relay's error as text.
func TestOverviewShowsOutboxRelays(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	mustNotContain(t, "overview without relays", tb.get(t, "/").body, "Outbox relays")
	startRelay(t, tb.b, "billing-relay", 2)
	startRelay(t, downBroker{tb.b}, "orders<b>-relay", 3)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs, err := outbox.Relays(tb.ctx, tb.rdb, tb.ns)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 2 && rs[0].Relayed == 2 && rs[1].Pending == 3 && rs[1].Error != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays not as expected within 30s: %+v", rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := tb.get(t, "/")
	wantStatus(t, "overview", r, http.StatusOK)
	mustContain(t, "overview", r.body, "<h2>Outbox relays</h2>", `id="relays"`,
		"<bdi>billing-relay</bdi>", "<bdi>delayq_outbox</bdi>", `<span class="state s-live">live</span>`,
		"<bdi>orders&lt;b&gt;-relay</bdi>", `<span class="state s-dead">failing</span>`, "enqueue refused (test)",
		`<td class="r" data-count="pending">3</td>`)
	mustNotContain(t, "overview", r.body, "orders<b>")
}
