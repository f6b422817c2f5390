// Command ordertimeout is a small order service that cancels orders left
// unpaid past their payment window, the way a shop would with a 30-minute
// window (here 2 seconds).
//
// It shows the habits that make at-least-once delivery safe:
//
//   - the order and its timeout are saved in one transaction of the shop's
//     SQL database, through the transactional outbox: a crash or a Redis
//     outage between the two cannot leave an order that never times out;
//   - the order id is the job id, and placing the same order twice saves
//     one order and schedules one timeout (the database's primary key
//     decides);
//   - paying an order cancels its timeout in the same transaction that marks
//     it paid, and the handler checks the order's state anyway, so a
//     payment that races the timeout is never undone;
//   - a customer who asks for more time gets a later deadline, and the
//     timeout moves with it (job.Replace), in one transaction again;
//   - the handler is idempotent: it changes state and releases stock in one
//     statement guarded by the state check, so a redelivery (here: a crash
//     after the side effect, before the ack) releases the stock once;
//   - a timeout that ran stays readable for a week (job.Retain), with its
//     attempts, when it ran and what the handler did (its result: "cancelled",
//     "already paid", ...), so afterwards the broker tells an order whose
//     timeout ran (succeeded) from one that never had a timeout scheduled
//     (broker.ErrNotFound). A timeout cancelled at payment, or one whose
//     retention ran out, answers not found as well.
//
// The relay that moves the outbox to Redis runs inside the worker process,
// as one of its services. The database is SQLite in a temporary file
// (modernc.org/sqlite, pure Go), so no database server is needed. Run it
// with
//
//	go run ./examples/ordertimeout                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/ordertimeout
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// OrderRef is the payload of the timeout job: a reference, not a copy of the
// order, so the handler always decides on the order's current state.
type OrderRef struct {
	ID string `json:"id"`
}

// CancelUnpaid cancels an order whose payment window closed. A failed
// attempt is retried after 200ms. A timeout that ran is kept for a week
// with its result, so support can still ask what it did. Its queue is
// named here only: the worker serves the queues of the types it handles,
// and the service cancels with CancelUnpaid.Queue().
var CancelUnpaid = job.New[OrderRef]("order.cancel_unpaid",
	job.Queue("orders"),
	job.Retry(retry.Constant(200*time.Millisecond)),
	job.Retain(7*24*time.Hour),
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rdb, where, closeRedis, err := demo.Redis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()
	b, err := broker.New(rdb, broker.Options{Namespace: "ordertimeout-" + job.NewID()})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "delayq-ordertimeout")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := OpenStore(ctx, filepath.Join(dir, "shop.db"))
	if err != nil {
		return err
	}
	defer store.Close()

	clock := demo.NewClock()
	const window = 2 * time.Second // a shop would give 30 minutes
	clock.Printf("using %s and SQLite in a temporary file; payment window %v", where, window)

	relay, err := outbox.NewRelay(store.Outbox(), b, outbox.RelayOptions{PollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	svc := &Service{
		store:  store,
		notify: relay.Notify,
		window: window,
		clock:  clock,
		done:   make(chan string, 16),
		// Order 1003's first attempt crashes right after its side effect.
		crashOnce: map[string]bool{"order-1003": true},
	}
	reg := job.NewRegistry()
	// The handler's result (what it did) is kept with the retained job.
	job.HandleResult(CancelUnpaid, reg, svc.HandleCancelUnpaid)
	// No Queues: the worker serves "orders", the queue of CancelUnpaid.
	// The relay runs as long as the worker does.
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Services: []worker.Service{relay}})
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	// Four orders are placed; two will be paid in time.
	for i, id := range []string{"order-1001", "order-1002", "order-1003", "order-1004"} {
		if err := svc.Place(ctx, id, 2500+100*i); err != nil {
			return err
		}
	}
	// The client of order-1001 retries its request: the order exists, and
	// its timeout is not scheduled a second time.
	if err := svc.Place(ctx, "order-1001", 2500); err != nil {
		return err
	}

	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return err
	}
	if err := svc.Pay(ctx, "order-1001"); err != nil {
		return err
	}
	// The customer of order-1002 asks for one more second.
	if err := svc.Extend(ctx, "order-1002", time.Second); err != nil {
		return err
	}
	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return err
	}
	if err := svc.Pay(ctx, "order-1004"); err != nil {
		return err
	}
	// The typed helper finds the job in the type's own queue.
	if info, err := CancelUnpaid.Lookup(ctx, b, "order-1002"); err == nil {
		clock.Printf("order-1002's timeout in Redis: %s, due in %v", info.State, time.Until(info.ReadyAt).Round(100*time.Millisecond))
	} else {
		return fmt.Errorf("look up order-1002's timeout: %w", err)
	}

	// Wait for the two unpaid orders' timeouts to finish (order-1003's
	// after its redelivery).
	for pending := map[string]bool{"order-1002": true, "order-1003": true}; len(pending) > 0; {
		select {
		case id := <-svc.done:
			delete(pending, id)
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for the timeouts of %v", pending)
		}
	}

	// A payment that arrives after the window closed is refused.
	if err := svc.Pay(ctx, "order-1002"); !errors.Is(err, ErrCancelled) {
		return fmt.Errorf("late payment of order-1002 was not refused: %v", err)
	}

	stopWorker() // stops the relay too
	if err := <-workerDone; err != nil {
		return err
	}
	sts, err := b.Stats(context.Background(), CancelUnpaid.Queue())
	if err != nil {
		return err
	}
	st := sts[0]
	lag, err := store.Outbox().Lag(context.Background())
	if err != nil {
		return err
	}
	orders, err := store.All(context.Background())
	if err != nil {
		return err
	}
	clock.Printf("final state (timeout jobs: scheduled %d, processing %d, dead %d; outbox rows pending %d):", st.Scheduled, st.Processing, st.Dead, lag.Pending)
	for _, o := range orders {
		clock.Printf("  %s %-9s stock released %d time(s)", o.ID, o.State, o.Restocked)
	}

	// Afterwards, support asks the broker: did this order's timeout run?
	// A retained timeout answers succeeded, with what the handler did;
	// an order that never had a timeout answers not found.
	clock.Printf("afterwards: did an order's timeout run? The broker keeps timeouts that ran for a week (job.Retain):")
	for _, want := range []struct {
		id       string
		attempts int
		result   string
	}{
		{"order-1002", 1, "cancelled"},         // cancelled by its first attempt
		{"order-1003", 2, "already cancelled"}, // the redelivery found the crashed attempt's work done
	} {
		if err := svc.ShowTimeout(context.Background(), b, want.id, want.attempts, want.result); err != nil {
			return err
		}
	}
	// order-1005 was never placed: no timeout was ever scheduled for it.
	switch _, err := CancelUnpaid.Lookup(context.Background(), b, "order-1005"); {
	case errors.Is(err, broker.ErrNotFound):
		clock.Printf("  order-1005: not found: never scheduled (no timeout pending, dead or run in the last week)")
	case err != nil:
		return fmt.Errorf("look up order-1005's timeout: %w", err)
	default:
		return errors.New("order-1005 was never placed, yet the broker has a timeout for it")
	}
	return nil
}

// ShowTimeout prints what the broker keeps of order id's timeout after it
// ran, and checks it: succeeded in attempts, not before the order's
// deadline, with the handler's result want.
func (s *Service) ShowTimeout(ctx context.Context, b *broker.Broker, id string, attempts int, want string) error {
	info, err := CancelUnpaid.Lookup(ctx, b, id)
	if err != nil {
		return fmt.Errorf("look up %s's timeout after it ran: %w", id, err)
	}
	if info.State != job.StateSucceeded {
		return fmt.Errorf("%s's timeout is %s after it ran, want %s", id, info.State, job.StateSucceeded)
	}
	result, err := job.ResultAs[string](info)
	if err != nil {
		return fmt.Errorf("%s's timeout: %w", id, err)
	}
	o, err := s.store.get(ctx, id)
	if err != nil {
		return err
	}
	after := info.StartedAt.Sub(o.Deadline)
	s.clock.Printf("  %s: %s in %d attempt(s), the last at %s (%dms after the window closed, for %dms); result %q; kept until %s",
		id, info.State, info.Attempts, info.StartedAt.Format("15:04:05.000"), after.Milliseconds(),
		info.FinishedAt.Sub(info.StartedAt).Milliseconds(), result, info.ExpiresAt.Format("2006-01-02 15:04"))
	switch {
	case result != want:
		return fmt.Errorf("%s's timeout has result %q, want %q", id, result, want)
	case info.Attempts != attempts:
		return fmt.Errorf("%s's timeout succeeded in %d attempt(s), want %d", id, info.Attempts, attempts)
	case after < 0:
		return fmt.Errorf("%s's timeout started %v before the order's deadline", id, -after)
	}
	return nil
}

// Service places, pays and extends orders and cancels the unpaid ones.
type Service struct {
	store  *Store
	notify func() // wakes the relay after a commit; may be nil
	window time.Duration
	clock  *demo.Clock
	done   chan string // ids whose timeout job finished

	crashMu   sync.Mutex
	crashOnce map[string]bool
}

// Place saves an order and schedules its timeout in one transaction, with
// the order id as the job id. Calling it again for the same order is
// harmless: the order exists, and nothing is scheduled twice.
func (s *Service) Place(ctx context.Context, id string, cents int) error {
	deadline := time.Now().Add(s.window)
	created := false
	err := s.store.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if created, err = s.store.Insert(ctx, tx, id, cents, deadline); err != nil || !created {
			return err
		}
		_, err = outbox.EnqueueTyped(ctx, s.store.Outbox(), tx, CancelUnpaid, OrderRef{ID: id}, job.ID(id), job.At(deadline))
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("place %s: %w", id, err)
	case !created:
		s.clock.Printf("place %s again (the client retried): the order exists already; its timeout is not scheduled twice", id)
		return nil
	}
	s.wake()
	s.clock.Printf("placed %s (%d.%02d EUR) and scheduled order.cancel_unpaid in %v with job id %s, in one transaction", id, cents/100, cents%100, s.window, id)
	return nil
}

// Pay marks an order paid and cancels its timeout job in one transaction,
// whether or not the job has reached Redis yet. It returns an error
// wrapping ErrCancelled when the order was cancelled first.
func (s *Service) Pay(ctx context.Context, id string) error {
	err := s.store.InTx(ctx, func(tx *sql.Tx) error {
		if err := s.store.MarkPaid(ctx, tx, id); err != nil {
			return err
		}
		_, err := s.store.Outbox().Cancel(ctx, tx, CancelUnpaid.Queue(), id)
		return err
	})
	if err != nil {
		s.clock.Printf("payment for %s refused: %v (refund the customer)", id, err)
		return err
	}
	s.wake()
	s.clock.Printf("%s paid: its timeout job is cancelled in the same transaction", id)
	return nil
}

// Extend gives a pending order more time: its deadline moves by extra, and
// its timeout job with it (job.Replace replaces the scheduled job's ready
// time), in one transaction.
func (s *Service) Extend(ctx context.Context, id string, extra time.Duration) error {
	var deadline time.Time
	err := s.store.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if deadline, err = s.store.Extend(ctx, tx, id, extra); err != nil {
			return err
		}
		_, err = outbox.EnqueueTyped(ctx, s.store.Outbox(), tx, CancelUnpaid, OrderRef{ID: id}, job.ID(id), job.At(deadline), job.Replace())
		return err
	})
	if err != nil {
		return fmt.Errorf("extend %s: %w", id, err)
	}
	s.wake()
	s.clock.Printf("%s asked for more time: window extended by %v; job.Replace moves its timeout", id, extra)
	return nil
}

func (s *Service) wake() {
	if s.notify != nil {
		s.notify()
	}
}

// HandleCancelUnpaid is the handler of order.cancel_unpaid. It is idempotent:
// the state check and the side effects are one statement of the store, so
// running it twice for one order cancels it and releases its stock once. A
// timeout that runs before the order's deadline (an extension that lost the
// race with a worker that had claimed the job already) waits for it. Its
// result, kept with the retained job, says what it did: "cancelled", or
// "already paid" / "already cancelled" when there was nothing to do.
func (s *Service) HandleCancelUnpaid(ctx context.Context, j *job.Job[OrderRef]) (string, error) {
	id := j.Args.ID
	o, cancelled, err := s.store.CancelIfDue(ctx, id, time.Now())
	switch {
	case errors.Is(err, errNotDue):
		return "", retry.After(time.Until(o.Deadline), err)
	case err != nil:
		return "", err // unknown order: retried, then dead-lettered for a person
	}
	if !cancelled {
		why := ""
		if j.Attempt > 1 {
			why = ", redelivered after: " + firstLine(j.LastError)
		}
		s.clock.Printf("order.cancel_unpaid %s (attempt %d%s): order is already %s, nothing to do", id, j.Attempt, why, o.State)
		s.done <- id
		return "already " + o.State, nil
	}
	s.clock.Printf("order.cancel_unpaid %s (attempt %d): cancelled unpaid order, stock released (lateness %dms)",
		id, j.Attempt, j.Lateness().Milliseconds())
	if s.crash(id) {
		// The process dies between the side effect and the ack. The
		// worker's Recover middleware turns the panic into a failed
		// attempt, so the job is delivered again.
		s.clock.Printf("order.cancel_unpaid %s: simulated crash after the side effect, before the ack", id)
		panic("simulated crash after the side effect")
	}
	s.done <- id
	return Cancelled, nil
}

func (s *Service) crash(id string) bool {
	s.crashMu.Lock()
	defer s.crashMu.Unlock()
	c := s.crashOnce[id]
	delete(s.crashOnce, id)
	return c
}

// Order states.
const (
	Pending   = "pending"
	Paid      = "paid"
	Cancelled = "cancelled"
)

// ErrCancelled: the order was cancelled before it was paid.
var ErrCancelled = errors.New("order was cancelled")

// errNotDue: the order's deadline has not passed yet.
var errNotDue = errors.New("the order's payment window is still open")

// Order is one order in the store.
type Order struct {
	ID        string
	Cents     int
	State     string
	Deadline  time.Time
	Restocked int // how often its items went back on the shelf: must stay <= 1
}

// Store is the shop's SQLite database: the orders table and the outbox.
type Store struct {
	db *sql.DB
	ob *outbox.Outbox
}

// OpenStore opens (creating) the database at path with the orders table
// and the outbox table.
func OpenStore(ctx context.Context, path string) (*Store, error) {
	// WAL, a busy timeout, and transactions that take the write lock when
	// they begin (SQLite has one writer at a time); one connection, so the
	// shop's writers and the relay take turns in database/sql's queue.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	ob, err := outbox.New(db, outbox.SQLite(), outbox.Options{})
	if err == nil {
		err = ob.Migrate(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
	id TEXT PRIMARY KEY, cents INTEGER NOT NULL, state TEXT NOT NULL,
	deadline_ms INTEGER NOT NULL, restocked INTEGER NOT NULL DEFAULT 0)`)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{db: db, ob: ob}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Outbox returns the store's outbox.
func (s *Store) Outbox() *outbox.Outbox { return s.ob }

// InTx runs fn in a transaction, committing it if fn returns nil.
func (s *Store) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Insert adds a pending order and reports whether it was new.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, id string, cents int, deadline time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, "INSERT INTO orders (id, cents, state, deadline_ms) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
		id, cents, Pending, deadline.UnixMilli())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// MarkPaid moves a pending order to paid. Paying a paid order is a no-op; a
// cancelled order gives an error wrapping ErrCancelled.
func (s *Store) MarkPaid(ctx context.Context, tx *sql.Tx, id string) error {
	var state string
	switch err := tx.QueryRowContext(ctx, "SELECT state FROM orders WHERE id = ?", id).Scan(&state); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("no order %s", id)
	case err != nil:
		return err
	case state == Cancelled:
		return fmt.Errorf("%s: %w", id, ErrCancelled)
	}
	_, err := tx.ExecContext(ctx, "UPDATE orders SET state = ? WHERE id = ?", Paid, id)
	return err
}

// Extend moves a pending order's deadline by extra and returns the new
// deadline.
func (s *Store) Extend(ctx context.Context, tx *sql.Tx, id string, extra time.Duration) (time.Time, error) {
	var ms int64
	err := tx.QueryRowContext(ctx, "UPDATE orders SET deadline_ms = deadline_ms + ? WHERE id = ? AND state = ? RETURNING deadline_ms",
		extra.Milliseconds(), id, Pending).Scan(&ms)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, fmt.Errorf("no pending order %s", id)
	}
	return time.UnixMilli(ms), err
}

// CancelIfDue cancels a pending order whose deadline has passed by now and
// releases its stock, in one statement. It reports whether it did; an
// order in another state is left alone, and one whose deadline is still
// ahead gives an error wrapping errNotDue (with the order, for its
// deadline).
func (s *Store) CancelIfDue(ctx context.Context, id string, now time.Time) (Order, bool, error) {
	res, err := s.db.ExecContext(ctx, "UPDATE orders SET state = ?, restocked = restocked + 1 WHERE id = ? AND state = ? AND deadline_ms <= ?",
		Cancelled, id, Pending, now.UnixMilli())
	if err != nil {
		return Order{}, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Order{}, false, err
	}
	o, err := s.get(ctx, id)
	switch {
	case err != nil:
		return Order{}, false, err
	case n == 0 && o.State == Pending:
		return o, false, fmt.Errorf("%s: %w until %s", id, errNotDue, o.Deadline.Format(time.TimeOnly))
	}
	return o, n == 1, nil
}

func (s *Store) get(ctx context.Context, id string) (Order, error) {
	var o Order
	var ms int64
	err := s.db.QueryRowContext(ctx, "SELECT id, cents, state, deadline_ms, restocked FROM orders WHERE id = ?", id).
		Scan(&o.ID, &o.Cents, &o.State, &ms, &o.Restocked)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("no order %s", id)
	}
	o.Deadline = time.UnixMilli(ms)
	return o, err
}

// All returns every order, by id.
func (s *Store) All(ctx context.Context) ([]Order, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT id, cents, state, deadline_ms, restocked FROM orders ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Order
	for rows.Next() {
		var o Order
		var ms int64
		if err := rows.Scan(&o.ID, &o.Cents, &o.State, &ms, &o.Restocked); err != nil {
			return nil, err
		}
		o.Deadline = time.UnixMilli(ms)
		out = append(out, o)
	}
	return out, rows.Err()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
