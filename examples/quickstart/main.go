// Command quickstart is the shortest tour of delayq: jobs scheduled with
// different delays, one retried with backoff, one dead-lettered and
// redriven, one cancelled before it could run.
//
//	go run ./examples/quickstart                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// Job types: shared by the code that enqueues and the code that handles.
type (
	SMS     struct{ To, Text string }
	Order   struct{ ID string }
	Invoice struct{ Number string }
	Report  struct{ Name string }
)

var (
	SendSMS      = job.New[SMS]("sms.send")
	CancelUnpaid = job.New[Order]("order.cancel_unpaid")
	BuildReport  = job.New[Report]("report.build", job.MaxRetries(5))
	SyncInvoice  = job.New[Invoice]("invoice.sync", job.MaxRetries(1))
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
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
	b, err := broker.New(rdb, broker.Options{Namespace: "quickstart-" + job.NewID()})
	if err != nil {
		return err
	}
	clock := demo.NewClock()
	clock.Printf("using %s", where)

	// Consumer side: handlers by type.
	reg := job.NewRegistry()
	var smsSent, reportTries atomic.Int32
	invoiceFixed := atomic.Bool{}
	done := make(chan string, 16)
	SendSMS.Handle(reg, func(ctx context.Context, j *job.Job[SMS]) error {
		clock.Printf("sms.send       to %s %q (lateness %dms)", j.Args.To, j.Args.Text, j.Lateness().Milliseconds())
		if smsSent.Add(1) == 2 {
			done <- "sms"
		}
		return nil
	})
	CancelUnpaid.Handle(reg, func(ctx context.Context, j *job.Job[Order]) error {
		clock.Printf("order.cancel_unpaid %s: this must not happen, the order was paid", j.Args.ID)
		return nil
	})
	BuildReport.Handle(reg, func(ctx context.Context, j *job.Job[Report]) error {
		if reportTries.Add(1) < 3 {
			clock.Printf("report.build   attempt %d failed, retrying with backoff (lateness %dms)", j.Attempt, j.Lateness().Milliseconds())
			return errors.New("warehouse busy")
		}
		clock.Printf("report.build   attempt %d succeeded (lateness %dms)", j.Attempt, j.Lateness().Milliseconds())
		done <- "report"
		return nil
	})
	SyncInvoice.Handle(reg, func(ctx context.Context, j *job.Job[Invoice]) error {
		if !invoiceFixed.Load() {
			clock.Printf("invoice.sync   %s attempt %d failed: account locked", j.Args.Number, j.Attempt)
			return errors.New("account locked")
		}
		clock.Printf("invoice.sync   %s succeeded after redrive (attempt %d)", j.Args.Number, j.Attempt)
		done <- "invoice"
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Concurrency: 4})
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	// Producer side.
	if _, err := SendSMS.Enqueue(ctx, b, SMS{To: "+15550100", Text: "your code is 4711"}, job.In(time.Second)); err != nil {
		return err
	}
	if _, err := SendSMS.Enqueue(ctx, b, SMS{To: "+15550101", Text: "your parcel is out"}, job.In(2*time.Second)); err != nil {
		return err
	}
	fast := retry.Exponential{Initial: 300 * time.Millisecond, Multiplier: 2, Max: 2 * time.Second, Jitter: 0.2}
	if _, err := BuildReport.Enqueue(ctx, b, Report{Name: "daily"}, job.In(500*time.Millisecond), job.WithBackoff(fast)); err != nil {
		return err
	}
	if _, err := SyncInvoice.Enqueue(ctx, b, Invoice{Number: "INV-7"}, job.ID("invoice-INV-7"), job.WithBackoff(fast)); err != nil {
		return err
	}
	if _, err := CancelUnpaid.Enqueue(ctx, b, Order{ID: "order-42"}, job.ID("order-42"), job.In(1500*time.Millisecond)); err != nil {
		return err
	}
	clock.Printf("scheduled: 2 SMS (in 1s, 2s), a report (in 500ms), an invoice sync (now), order-42's unpaid timeout (in 1.5s)")
	// A second enqueue of the id, as a second checkout would send it: a
	// call of its own, refused however soon it comes.
	_, err = CancelUnpaid.Enqueue(ctx, b, Order{ID: "order-42"}, job.ID("order-42"), job.In(time.Minute))
	clock.Printf("scheduling order-42's timeout again is refused: %v", err)
	if !errors.Is(err, broker.ErrDuplicate) {
		return fmt.Errorf("duplicate id was not refused: %v", err)
	}
	if _, err := b.Cancel(ctx, "default", "order-42"); err != nil {
		return err
	}
	clock.Printf("order-42 was paid: its timeout job is cancelled and will never run")

	// The invoice job dies after its retry; fix the cause and redrive it.
	dead := deadletter.New(b)
	var rec *job.DeadRecord
	for rec == nil {
		if rec, err = dead.Get(ctx, "default", "invoice-INV-7"); err != nil && !errors.Is(err, broker.ErrNotFound) {
			return err
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the dead letter: %w", err)
		}
	}
	clock.Printf("dead letter:   %s after %d attempts: %s", rec.ID, rec.Attempts, rec.Error)
	invoiceFixed.Store(true)
	if err := dead.Redrive(ctx, "default", 0, rec.ID); err != nil {
		return err
	}
	clock.Printf("redriven:      %s (account unlocked)", rec.ID)

	for pending := map[string]bool{"sms": true, "report": true, "invoice": true}; len(pending) > 0; {
		select {
		case name := <-done:
			delete(pending, name)
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %v", pending)
		}
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return err
	}
	sts, err := b.Stats(context.Background(), "default")
	if err != nil {
		return err
	}
	st := sts[0]
	clock.Printf("done: scheduled %d, processing %d, dead %d", st.Scheduled, st.Processing, st.Dead)
	return nil
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
