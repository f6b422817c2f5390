package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// acker acknowledges the jobs whose handlers succeeded, as many per call as
// have gathered (up to maxBatch): a quiet worker acks at once, a busy one
// amortises the round trip.
type acker struct {
	w       *Worker
	mu      sync.Mutex
	pending []acking
	sig     chan struct{} // pending grew (buffered 1)
}

// acking is a lease waiting for the acker and the attempt's settle function.
type acking struct {
	lease  protocol.Lease
	settle func(job.Result)
}

func newAcker(w *Worker) *acker { return &acker{w: w, sig: make(chan struct{}, 1)} }

// add queues a lease; the acker settles the attempt once it is recorded.
func (a *acker) add(l protocol.Lease, settle func(job.Result)) {
	a.mu.Lock()
	a.pending = append(a.pending, acking{l, settle})
	a.mu.Unlock()
	signal(a.sig)
}

// run acknowledges queued leases until stop is closed; then it flushes what
// is pending.
func (a *acker) run(bg context.Context, stop <-chan struct{}) {
	for {
		var stopping bool
		select {
		case <-a.sig:
		case <-stop:
			stopping = true
		}
		for {
			a.mu.Lock()
			batch := a.pending
			if len(batch) > maxBatch {
				batch = batch[:maxBatch:maxBatch]
				a.pending = a.pending[maxBatch:]
			} else {
				a.pending = nil
			}
			a.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			a.ack(bg, batch)
		}
		if stopping {
			return
		}
	}
}

// ack acks a batch, retrying the leases that failed for a Redis error, and
// settles each attempt.
func (a *acker) ack(bg context.Context, batch []acking) {
	w := a.w
	todo := batch
	leases := make([]protocol.Lease, len(batch))
	err := w.persist(bg, batch[0].lease, "ack", func(ctx context.Context) error {
		leases = leases[:0]
		for _, a := range todo {
			leases = append(leases, a.lease)
		}
		err := w.b.Ack(ctx, leases...)
		var be *job.BatchError
		if err == nil {
			for _, a := range todo {
				a.settle(job.Result{Outcome: job.OutcomeSuccess})
			}
			todo = nil
			return nil
		}
		if !errors.As(err, &be) || len(be.Errs) != len(todo) {
			return err
		}
		var again []acking
		var errs []error
		for i, e := range be.Errs {
			switch {
			case e == nil:
				todo[i].settle(job.Result{Outcome: job.OutcomeSuccess})
			case errors.Is(e, broker.ErrLeaseLost):
				w.log.Warn().Str("job_id", todo[i].lease.ID).Str("queue", todo[i].lease.Queue()).Msg("ack refused: lease lost; the job was or will be handled again")
				todo[i].settle(job.Result{Outcome: job.OutcomeLeaseLost, Lost: e})
			default:
				again = append(again, todo[i])
				errs = append(errs, e)
			}
		}
		todo = again
		if len(again) == 0 {
			return nil
		}
		// Only the Redis errors: a lost lease among them must not stop
		// the retries of the others.
		return &job.BatchError{Errs: errs}
	})
	for _, a := range todo {
		a.settle(job.Result{Outcome: job.OutcomeLeaseLost, Lost: err})
	}
}
