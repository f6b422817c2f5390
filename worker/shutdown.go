package worker

import (
	"context"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/protocol"
)

// shutdown waits for in-flight jobs until the deadline, then cancels and
// releases the rest.
func (w *Worker) shutdown(bg context.Context, cancelJobs context.CancelFunc, handlers *sync.WaitGroup) {
	waiting, n, idle := w.slots.close()
	if len(waiting) > 0 {
		// Prefetched jobs that have not started go back at once, unrun.
		w.giveBack(waiting)
		w.log.Info().Int("released", len(waiting)).Msg("shutting down: handed back prefetched jobs that had not started")
	}
	if n > 0 {
		w.log.Info().Int("in_flight", n).Int64("timeout_ms", w.cfg.ShutdownTimeout.Milliseconds()).Msg("shutting down: waiting for in-flight jobs")
	}
	t := time.NewTimer(w.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-idle:
		handlers.Wait()
		return
	case <-t.C:
	}
	unfinished := w.slots.releaseAll()
	cancelJobs()
	if len(unfinished) > 0 {
		w.giveBack(unfinished)
		w.log.Warn().Int("released", len(unfinished)).Msg("shutdown deadline passed: released unfinished jobs")
	}
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	grace := time.NewTimer(time.Second)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		w.log.Error().Msg("handlers ignore their cancelled context; returning without them")
	}
}

// giveBack hands back the leases of tasks marked handed back (slots'
// handBack) through the settler, without spending their attempts; each
// task is forgotten once its release is recorded, or has failed.
func (w *Worker) giveBack(tasks []*task) {
	for _, t := range tasks {
		t.cancel(nil)
		w.settler.add(&protocol.Op{Kind: protocol.OpRelease, Lease: t.c.Lease}, settling{t: t, release: true})
	}
}

// release hands leases back through the settler, without spending their
// attempts.
func (w *Worker) release(leases []protocol.Lease) {
	for i := range leases {
		w.settler.add(&protocol.Op{Kind: protocol.OpRelease, Lease: leases[i]}, settling{release: true})
	}
}
