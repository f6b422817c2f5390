package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// Save an order and schedule its timeout in one transaction, then let a
// relay move the job to Redis. The example is compiled, not run: package
// outbox's tests register no SQL driver, so that the core module requires
// none.
func Example() {
	ctx := context.Background()
	rdb, ns, done := redistest.ForExample("outbox.Example")
	defer done()
	b, _ := broker.New(rdb, broker.Options{Namespace: ns})

	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, _ = db.ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY)")

	ob, _ := outbox.New(db, outbox.SQLite(), outbox.Options{})
	if err := ob.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}

	tx, _ := db.BeginTx(ctx, nil)
	_, _ = tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (?)", "1001")
	env, err := outbox.EnqueueTyped(ctx, ob, tx, cancelUnpaid, Order{ID: "1001"}, job.ID("order-1001"), job.In(30*time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println(err)
		return
	}
	lag, _ := ob.Lag(ctx)
	fmt.Printf("committed %s; %d row in the outbox\n", env.ID, lag.Pending)

	relay, _ := outbox.NewRelay(ob, b, outbox.RelayOptions{})
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error)
	go func() { finished <- relay.Run(runCtx) }()
	for lag.Pending > 0 {
		time.Sleep(10 * time.Millisecond)
		lag, _ = ob.Lag(ctx)
	}
	stop()
	<-finished

	info, _ := b.Job(ctx, "orders", "order-1001")
	fmt.Printf("in Redis: %s, %s, due in about %v\n", info.ID, info.State, time.Until(info.ReadyAt).Round(time.Minute))
	fmt.Printf("relayed: %d enqueued\n", relay.Stats().Enqueued)
	// With an SQLite driver registered as "sqlite" (modernc.org/sqlite,
	// say), this prints:
	//
	//	committed order-1001; 1 row in the outbox
	//	in Redis: order-1001, scheduled, due in about 30m0s
	//	relayed: 1 enqueued
	//
	// (examples/outbox runs the same flow, and outbox/sqltest tests it on
	// SQLite and PostgreSQL.)
}
