// Command ordertimeout is a small order service that cancels orders left
// unpaid past their payment window, the way a shop would with a 30-minute
// window (here 2 seconds).
//
// It shows the habits that make at-least-once delivery safe:
//
//   - the order id is the job id, so placing the same order twice schedules
//     one timeout (the second is refused with broker.ErrDuplicate);
//   - paying an order cancels its timeout job, and the handler checks the
//     order's state anyway, so a payment that races the timeout is never
//     undone;
//   - the handler is idempotent: it changes state and releases stock in one
//     step guarded by the state check, so a redelivery (here: a crash after
//     the side effect, before the ack) releases the stock once.
//
// Run it with
//
//	go run ./examples/ordertimeout                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/ordertimeout
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// OrderRef is the payload of the timeout job: a reference, not a copy of the
// order, so the handler always decides on the order's current state.
type OrderRef struct {
	ID string `json:"id"`
}

// CancelUnpaid cancels an order whose payment window closed. A failed
// attempt is retried after 200ms.
var CancelUnpaid = job.New[OrderRef]("order.cancel_unpaid",
	job.Queue("orders"),
	job.Retry(retry.Constant(200*time.Millisecond)),
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
	clock := demo.NewClock()
	const window = 2 * time.Second // a shop would give 30 minutes
	clock.Printf("using %s; payment window %v", where, window)

	svc := &Service{
		store:  NewStore(),
		jobs:   b,
		window: window,
		clock:  clock,
		done:   make(chan string, 16),
		// Order 1003's first attempt crashes right after its side effect.
		crashOnce: map[string]bool{"order-1003": true},
	}
	reg := job.NewRegistry()
	CancelUnpaid.Handle(reg, svc.HandleCancelUnpaid)
	w, err := worker.New(worker.Config{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: "orders"}}})
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
	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return err
	}
	if err := svc.Pay(ctx, "order-1004"); err != nil {
		return err
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

	stopWorker()
	if err := <-workerDone; err != nil {
		return err
	}
	st, err := b.Stats(context.Background(), "orders")
	if err != nil {
		return err
	}
	clock.Printf("final state (timeout jobs: scheduled %d, processing %d, dead %d):", st.Scheduled, st.Processing, st.Dead)
	for _, o := range svc.store.All() {
		clock.Printf("  %s %-9s stock released %d time(s)", o.ID, o.State, o.Restocked)
	}
	return nil
}

// Jobs is what the service needs of the broker: *broker.Broker, or in
// tests a delayqtest.Enqueuer.
type Jobs interface {
	job.Enqueuer
	Cancel(ctx context.Context, queue, id string) error
}

// Service places and pays orders and cancels the unpaid ones.
type Service struct {
	store  *Store
	jobs   Jobs
	window time.Duration
	clock  *demo.Clock
	done   chan string // ids whose timeout job finished

	crashMu   sync.Mutex
	crashOnce map[string]bool
}

// Place stores an order and schedules its timeout, with the order id as the
// job id. Calling it again for the same order is harmless: the store keeps
// the first order and the broker refuses a second timeout job. If the
// schedule fails for another reason the caller retries Place.
func (s *Service) Place(ctx context.Context, id string, cents int) error {
	if !s.store.Insert(id, cents) {
		s.clock.Printf("place %s again (the client retried): the order exists already", id)
	}
	_, err := CancelUnpaid.Enqueue(ctx, s.jobs, OrderRef{ID: id}, job.ID(id), job.In(s.window))
	switch {
	case err == nil:
		s.clock.Printf("placed %s (%d.%02d EUR); order.cancel_unpaid scheduled in %v with job id %s", id, cents/100, cents%100, s.window, id)
		return nil
	case errors.Is(err, broker.ErrDuplicate):
		s.clock.Printf("the second timeout for %s is refused as a duplicate: %v", id, err)
		return nil
	default:
		return fmt.Errorf("schedule the timeout of %s: %w", id, err)
	}
}

// Pay marks an order paid and cancels its timeout job. It returns an error
// wrapping ErrCancelled when the order was cancelled first.
func (s *Service) Pay(ctx context.Context, id string) error {
	if err := s.store.MarkPaid(id); err != nil {
		s.clock.Printf("payment for %s refused: %v (refund the customer)", id, err)
		return err
	}
	err := s.jobs.Cancel(ctx, "orders", id)
	switch {
	case err == nil:
		s.clock.Printf("%s paid: its timeout job is cancelled", id)
	case errors.Is(err, broker.ErrInProgress), errors.Is(err, broker.ErrNotFound):
		// The timeout is running or ran: its handler sees the order paid
		// and leaves it alone.
		s.clock.Printf("%s paid; its timeout job could not be cancelled (%v), and will find the order paid", id, err)
	default:
		// Harmless for the same reason; the job stays scheduled.
		s.clock.Printf("%s paid; cancelling its timeout job failed: %v", id, err)
	}
	return nil
}

// HandleCancelUnpaid is the handler of order.cancel_unpaid. It is idempotent:
// the state check and the side effects happen in one step of the store, so
// running it twice for one order cancels it and releases its stock once.
func (s *Service) HandleCancelUnpaid(ctx context.Context, j *job.Job[OrderRef]) error {
	id := j.Args.ID
	o, cancelled, err := s.store.CancelIfPending(id)
	if err != nil {
		return err // unknown order: retried, then dead-lettered for a person
	}
	if !cancelled {
		why := ""
		if j.Attempt > 1 {
			why = ", redelivered after: " + firstLine(j.LastError)
		}
		s.clock.Printf("order.cancel_unpaid %s (attempt %d%s): order is already %s, nothing to do", id, j.Attempt, why, o.State)
		s.done <- id
		return nil
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
	return nil
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

// Order is one order in the store.
type Order struct {
	ID        string
	Cents     int
	State     string
	Restocked int // how often its items went back on the shelf: must stay <= 1
}

// Store is an in-memory order table. Each method is one transaction, as it
// would be in a database.
type Store struct {
	mu     sync.Mutex
	orders map[string]*Order
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{orders: make(map[string]*Order)} }

// Insert adds a pending order and reports whether it was new.
func (s *Store) Insert(id string, cents int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.orders[id]; ok {
		return false
	}
	s.orders[id] = &Order{ID: id, Cents: cents, State: Pending}
	return true
}

// MarkPaid moves a pending order to paid. Paying a paid order is a no-op; a
// cancelled order gives an error wrapping ErrCancelled.
func (s *Store) MarkPaid(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[id]
	switch {
	case !ok:
		return fmt.Errorf("no order %s", id)
	case o.State == Cancelled:
		return fmt.Errorf("%s: %w", id, ErrCancelled)
	}
	o.State = Paid
	return nil
}

// CancelIfPending cancels a pending order and releases its stock, in one
// step. It reports whether it did; an order in any other state is left
// alone.
func (s *Store) CancelIfPending(id string) (Order, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[id]
	if !ok {
		return Order{}, false, fmt.Errorf("no order %s", id)
	}
	if o.State != Pending {
		return *o, false, nil
	}
	o.State = Cancelled
	o.Restocked++
	return *o, true, nil
}

// All returns a copy of every order, by id.
func (s *Store) All() []Order {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Order, 0, len(s.orders))
	for _, o := range s.orders {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
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
