// Command outbox places orders through a transactional outbox: saving an
// order and scheduling its payment timeout is one commit of the
// application's SQL database, so a crash or a Redis outage between the two
// cannot leave an order that never times out.
//
// It shows:
//
//   - "save the order and schedule its timeout" in one transaction;
//   - a transaction that rolls back: no order, and no timeout either;
//   - "mark paid and cancel the timeout" in one transaction, both before
//     the job reached Redis (it never gets there) and after (the relay
//     removes it from Redis);
//   - the relay running inside the worker process, as one of its services.
//
// The database is SQLite in a temporary file (modernc.org/sqlite, pure Go),
// so no database server is needed. Run it with
//
//	go run ./examples/outbox                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/outbox
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
	"github.com/delayq/delayq/worker"
)

// OrderRef is the payload of the timeout job.
type OrderRef struct {
	ID string `json:"id"`
}

// CancelUnpaid cancels an order whose payment window closed.
var CancelUnpaid = job.New[OrderRef]("order.cancel_unpaid", job.Queue("orders"))

const window = 1500 * time.Millisecond // a shop would give 30 minutes

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := demo.NewClock()
	rdb, where, closeRedis, err := demo.Redis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()
	b, err := broker.New(rdb, broker.Options{Namespace: "outbox-" + job.NewID()})
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "delayq-outbox-example")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// WAL, a busy timeout, and transactions that take the write lock when
	// they begin (SQLite has one writer at a time).
	dsn := "file:" + filepath.Join(dir, "shop.db") + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// One connection: the application's writers and the relay take turns in
	// database/sql's queue instead of polling for SQLite's write lock.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER NOT NULL, state TEXT NOT NULL)"); err != nil {
		return err
	}
	ob, err := outbox.New(db, outbox.SQLite(), outbox.Options{})
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	clock.Printf("using %s and SQLite in a temporary file; payment window %v", where, window)

	shop := &Shop{db: db, ob: ob, clock: clock, ran: map[string]int{}}

	// The relay is not running yet: jobs wait in the outbox, as they would
	// while Redis is down.
	if err := shop.Place(ctx, "order-1001", 2500, nil); err != nil {
		return err
	}
	if err := shop.Place(ctx, "order-1002", 990, errors.New("card declined")); err != nil {
		return err
	}
	if err := shop.Place(ctx, "order-1003", 4200, nil); err != nil {
		return err
	}
	if err := shop.Pay(ctx, "order-1003"); err != nil {
		return err
	}
	lag, err := ob.Lag(ctx)
	if err != nil {
		return err
	}
	clock.Printf("outbox before the relay starts: %d rows pending (order-1001's job; order-1003's cancel), the oldest waiting %v", lag.Pending, lag.Oldest.Round(time.Millisecond))

	// The relay and a worker, side by side in this process.
	cancelled := make(chan string, 4)
	relay, err := outbox.NewRelay(ob, b, outbox.RelayOptions{
		PollInterval: 200 * time.Millisecond,
		OnCancel: func(queue, id string, err error) {
			switch {
			case err == nil:
				clock.Printf("relay: %s's timeout removed from Redis", id)
			case errors.Is(err, broker.ErrNotFound):
				clock.Printf("relay: %s's timeout was not in Redis: nothing to remove", id)
			default:
				clock.Printf("relay: %s's timeout could not be removed: %v", id, err)
			}
			cancelled <- id
		},
	})
	if err != nil {
		return err
	}
	shop.relay = relay
	reg := job.NewRegistry()
	CancelUnpaid.Handle(reg, shop.HandleCancelUnpaid)
	// The relay runs as one of the worker's services: started with it,
	// stopped at its shutdown. No Queues: it serves CancelUnpaid's.
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Services: []worker.Service{relay}})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	stopAll := sync.OnceValue(func() error {
		stop()
		return <-done
	})
	defer stopAll()
	relay.Notify()

	if err := waitFor(ctx, func() bool { l, err := ob.Lag(ctx); return err == nil && l.Pending == 0 }); err != nil {
		return fmt.Errorf("outbox not drained: %w", err)
	}
	<-cancelled
	for _, id := range []string{"order-1001", "order-1002", "order-1003"} {
		_, err := CancelUnpaid.Lookup(ctx, b, id)
		clock.Printf("redis has %s's timeout: %v", id, err == nil)
	}

	// Order 1004's timeout reaches Redis, then the order is paid.
	if err := shop.Place(ctx, "order-1004", 1500, nil); err != nil {
		return err
	}
	if err := waitFor(ctx, func() bool { _, err := CancelUnpaid.Lookup(ctx, b, "order-1004"); return err == nil }); err != nil {
		return fmt.Errorf("order-1004's timeout did not reach Redis: %w", err)
	}
	clock.Printf("relay: order-1004's timeout is in Redis")
	if err := shop.Pay(ctx, "order-1004"); err != nil {
		return err
	}
	<-cancelled

	// Order 1001 stays unpaid: its timeout runs when the window closes.
	if err := waitFor(ctx, func() bool { return shop.state(ctx, "order-1001") == "cancelled" }); err != nil {
		return fmt.Errorf("order-1001 was not cancelled: %w", err)
	}
	time.Sleep(window) // long enough for a timeout that should not run to show
	if err := stopAll(); err != nil {
		return err
	}

	s := relay.Stats()
	clock.Printf("relay: %d jobs enqueued, %d cancels applied (%d removed a job, %d found none), %d failed rows",
		s.Enqueued, s.Cancelled+s.NotFound, s.Cancelled, s.NotFound, s.Failed)
	clock.Printf("final state:")
	for _, id := range []string{"order-1001", "order-1002", "order-1003", "order-1004"} {
		clock.Printf("  %s %-9s timeout ran %d time(s)", id, shop.state(ctx, id), shop.timeoutRuns(id))
	}
	return nil
}

// Shop places and pays orders in its SQL database, with their timeouts in
// the same transactions.
type Shop struct {
	db    *sql.DB
	ob    *outbox.Outbox
	relay *outbox.Relay // nil until it runs
	clock *demo.Clock

	mu  sync.Mutex
	ran map[string]int // timeout handlings per order
}

// Place saves an order and schedules its timeout in one transaction. A
// failure after the insert (fail) rolls both back.
func (s *Shop) Place(ctx context.Context, id string, cents int, fail error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, cents, state) VALUES (?, ?, 'open')", id, cents); err != nil {
		return err
	}
	env, err := outbox.EnqueueTyped(ctx, s.ob, tx, CancelUnpaid, OrderRef{ID: id}, job.ID(id), job.In(window))
	if err != nil {
		return err
	}
	if fail != nil {
		if err := tx.Rollback(); err != nil {
			return err
		}
		s.clock.Printf("place %s: %v after the insert; transaction rolled back: no order, no timeout", id, fail)
		return nil
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.clock.Printf("placed %s (%d.%02d EUR) and scheduled its timeout in one transaction (job %s, due in %v)",
		id, cents/100, cents%100, env.ID, window)
	if s.relay != nil {
		s.relay.Notify()
	}
	return nil
}

// Pay marks an order paid and cancels its timeout in one transaction.
func (s *Shop) Pay(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'paid' WHERE id = ? AND state = 'open'", id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%s is not open", id)
	}
	removed, err := s.ob.Cancel(ctx, tx, CancelUnpaid.Queue(), id)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if removed {
		s.clock.Printf("%s paid and its timeout cancelled in one transaction: the job had not reached Redis and never will", id)
	} else {
		s.clock.Printf("%s paid and its timeout cancelled in one transaction: the job is in Redis; the relay removes it", id)
	}
	if s.relay != nil {
		s.relay.Notify()
	}
	return nil
}

// HandleCancelUnpaid cancels the order if it is still open: the state
// check in the UPDATE makes a redelivery harmless.
func (s *Shop) HandleCancelUnpaid(ctx context.Context, j *job.Job[OrderRef]) error {
	s.mu.Lock()
	s.ran[j.Args.ID]++
	s.mu.Unlock()
	res, err := s.db.ExecContext(ctx, "UPDATE orders SET state = 'cancelled' WHERE id = ? AND state = 'open'", j.Args.ID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		s.clock.Printf("order.cancel_unpaid %s: window closed, order cancelled", j.Args.ID)
	} else {
		s.clock.Printf("order.cancel_unpaid %s: order is not open, nothing to do", j.Args.ID)
	}
	return nil
}

func (s *Shop) state(ctx context.Context, id string) string {
	var st string
	if err := s.db.QueryRowContext(ctx, "SELECT state FROM orders WHERE id = ?", id).Scan(&st); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "absent"
		}
		return "error: " + err.Error()
	}
	return st
}

func (s *Shop) timeoutRuns(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran[id]
}

// waitFor polls cond every 10ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
