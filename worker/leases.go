package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/job"
)

// heartbeat extends the leases of the jobs the worker holds (running,
// prefetched, and finished but with their outcome not recorded yet), one
// Extend call per shard, each in its shard's lane: a shard whose extend is
// still under way (a slow or hung shard) is left out of this round, and
// delays no other. First it hands back or cancels what a stall left stale.
func (w *Worker) heartbeat(bg context.Context) {
	w.checkStale()
	w.unstall()
	leases := w.slots.held()
	if len(leases) == 0 {
		return
	}
	byShard := map[string][]protocol.Lease{}
	for _, l := range leases {
		byShard[l.Shard.Name()] = append(byShard[l.Shard.Name()], l)
	}
	for _, group := range byShard {
		if !w.extender.send(bg, group) {
			w.log.Debug().Str("queue", group[0].Queue()).Str("shard", group[0].Shard.Name()).Msg("the last extend of this shard is still under way; skipped")
		}
	}
}

// extender runs the heartbeat's Extend calls, one lane (a goroutine with
// one call in flight) per shard. Only the heartbeat's goroutine sends.
type extender struct {
	w     *Worker
	lanes map[string]*extendLane
	wg    sync.WaitGroup
}

// extendLane is one shard's: busy while a call is under way.
type extendLane struct {
	busy atomic.Bool
	work chan []protocol.Lease // buffered 1
}

func newExtender(w *Worker) *extender { return &extender{w: w, lanes: map[string]*extendLane{}} }

// send hands leases, all of one shard, to that shard's lane; it reports
// false when the lane's last call is still under way.
func (e *extender) send(bg context.Context, leases []protocol.Lease) bool {
	name := leases[0].Shard.Name()
	l := e.lanes[name]
	if l == nil {
		l = &extendLane{work: make(chan []protocol.Lease, 1)}
		e.lanes[name] = l
		e.wg.Go(func() {
			for leases := range l.work {
				e.w.extend(bg, leases)
				l.busy.Store(false)
			}
		})
	}
	if !l.busy.CompareAndSwap(false, true) {
		return false
	}
	l.work <- leases
	return true
}

// stop ends the lanes once their calls are done.
func (e *extender) stop() {
	for _, l := range e.lanes {
		close(l.work)
	}
	e.wg.Wait()
}

// extend extends leases (of one shard) in one call: a lease it confirms
// is live for a lease from when the call was sent; a job whose lease is
// lost gets its handler's context cancelled.
func (w *Worker) extend(bg context.Context, leases []protocol.Lease) {
	sent := time.Now()
	err := w.b.Extend(bg, w.cfg.Lease, leases...)
	// A reply read after a stall: what the stall left stale is handed back
	// or cancelled as such first (ErrLeaseStale), whatever the reply says.
	w.checkStale()
	var be *job.BatchError
	if err != nil && !errors.As(err, &be) {
		w.log.Error().Err(err).Str("queue", leases[0].Queue()).Msg("heartbeat failed")
		return
	}
	for i := range leases {
		l := &leases[i]
		var e error
		if be != nil {
			e = be.Errs[i]
		}
		switch {
		case e == nil:
			w.slots.extended(l, sent)
		case errors.Is(e, broker.ErrLeaseLost):
			if w.slots.lost(l, broker.ErrLeaseLost) {
				w.log.Warn().Str("job_id", l.ID).Str("queue", l.Queue()).Msg("lease lost; cancelling the handler")
			}
		case errors.Is(e, broker.ErrCancelled):
			// Extended, but the cancel notice was missed (or is on its
			// way): the same request, read from Redis.
			w.slots.extended(l, sent)
			if w.slots.lost(l, broker.ErrCancelled) {
				w.log.Info().Str("job_id", l.ID).Str("queue", l.Queue()).Msg("job cancelled; cancelling the handler")
			}
		default:
			w.log.Error().Err(e).Str("job_id", l.ID).Msg("heartbeat failed")
		}
	}
}

// watch checks for stale leases every tick (Lease/20, from 5 ms to 250
// ms) until ctx is done. Its timer is on the monotonic clock, so after
// the process was stopped (SIGSTOP, a frozen VM) it fires the moment the
// process runs again, before any round trip to Redis.
func (w *Worker) watch(ctx context.Context) {
	tick := min(max(w.cfg.Lease/20, 5*time.Millisecond), 250*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.checkStale()
		}
	}
}

// checkStale hands back the prefetched jobs whose lease may have run out,
// and cancels the handlers of running jobs whose lease may have run out
// (ErrLeaseStale): no extend confirmed them for a lease less the margin.
func (w *Worker) checkStale() {
	back, cancelled := w.slots.stale(time.Now())
	if cancelled > 0 {
		w.log.Warn().Int("handlers", cancelled).Msg("leases may have run out (the process was stalled, or cut off from Redis): cancelled the handlers")
	}
	if len(back) > 0 {
		w.giveBack(back)
		w.log.Warn().Int("released", len(back)).Msg("leases may have run out (the process was stalled, or cut off from Redis): handed back prefetched jobs unrun")
	}
}

// reap retries or dead-letters the jobs of expired leases in every shard of
// every queue: one Reap and one Settle call per round of up to maxBatch.
func (w *Worker) reap(ctx, bg context.Context) {
	for _, q := range w.cfg.Queues {
		shards, err := w.b.Shards(bg, q.Name)
		if err != nil {
			w.log.Error().Err(err).Str("queue", q.Name).Msg("reap failed")
			continue
		}
		for _, s := range shards {
			for ctx.Err() == nil {
				res, err := w.b.Reap(bg, s, maxBatch)
				if err != nil {
					w.log.Error().Err(err).Str("queue", q.Name).Str("shard", s.Name()).Msg("reap failed")
					break
				}
				if len(res.Orphans) > 0 {
					w.log.Warn().Str("queue", q.Name).Strs("job_ids", res.Orphans).Msg("removed processing ids without an envelope")
				}
				w.expire(bg, s, res.Jobs)
				if len(res.Jobs) < maxBatch {
					break
				}
			}
			// Endings of batch members whose worker died between its
			// settle and counting them in their batch.
			if n, err := w.b.SweepBatches(w.callbackCtx(bg), s, maxBatch); err != nil {
				w.log.Error().Err(err).Str("queue", q.Name).Str("shard", s.Name()).Msg("batch sweep failed; next round tries again")
			} else if n > 0 {
				w.log.Debug().Int("endings", n).Str("queue", q.Name).Msg("batch endings swept")
			}
		}
	}
}

// expire records the jobs of expired leases of shard s as failed attempts,
// in one call.
func (w *Worker) expire(bg context.Context, s keyspace.Shard, jobs []protocol.Claimed) {
	if len(jobs) == 0 {
		return
	}
	ops := make([]protocol.Op, len(jobs))
	for i := range jobs {
		ops[i] = w.expiry(&jobs[i])
	}
	w.reapSeq++
	res, err := w.b.Settle(bg, s, w.caller, protocol.LaneReap, strconv.FormatUint(w.reapSeq, 10), ops)
	if res == nil {
		w.log.Error().Err(err).Str("queue", s.Queue()).Msg("reap failed; next round tries again")
		return
	}
	w.trimmed(s, res)
	w.endBatches(bg, s, ops, res)
	for i := range jobs {
		logger := w.jobLogger(&jobs[i])
		switch e := res[i].Err; {
		case e == nil:
			outcome := job.OutcomeRetry
			if ops[i].Kind == protocol.OpKill {
				outcome = job.OutcomeDead
			}
			logger.Warn().Str("outcome", outcome.String()).Msg("lease expired; job reaped")
		default:
			logger.Debug().Err(e).Msg("reap skipped")
		}
	}
}

// expiry decides one job whose lease ran out, as a failed attempt: a job
// that does not decode (or whose state is corrupt) is dead-lettered.
func (w *Worker) expiry(c *protocol.Claimed) protocol.Op {
	if c.Err != nil {
		return kill(c, death(c, nil, c.Err), true)
	}
	m := c.Message()
	if c.Cancelled {
		// Asked to stop while its worker died: cancelled, not retried.
		d := death(c, m, fmt.Errorf("%w while running; its worker stopped before it ended", broker.ErrCancelled))
		d.Reason = broker.ReasonCancelled
		return kill(c, d, true)
	}
	m.Attempt = max(c.Attempt, 1)
	entry, _ := w.cfg.Registry.Table(registry.Key{}).Lookup(m.Type)
	if d := w.decide(m, entry, ErrLeaseExpired); !d.Dead {
		env := *c.Envelope
		env.LastError = ErrLeaseExpired.Error()
		return protocol.Op{Kind: protocol.OpRetry, Lease: c.Lease, Batch: batchOf(c), Delay: d.Delay, Env: &env, Expired: true}
	}
	return kill(c, death(c, m, ErrLeaseExpired), true)
}

// unstall keeps the adaptive prefetch honest when handlers slow down: a
// handler that has run longer than the mean so far counts as a sample of
// that length already (so the prefetch shrinks before it ends), and the
// prefetched jobs beyond what the prefetch now allows are handed back
// unrun (no attempt spent), for another worker to take, instead of waiting
// behind it.
func (w *Worker) unstall() {
	if w.cfg.Prefetch != 0 {
		return
	}
	if age := w.slots.oldestRunning(); age > 0 && int64(age) > w.pace.handler.Load() {
		w.pace.handled(age)
	}
	back := w.slots.trimLine(w.pace.depth(w.cfg))
	if len(back) == 0 {
		return
	}
	w.giveBack(back)
	w.log.Info().Int("released", len(back)).Msg("handlers slowed down: handed back prefetched jobs that had not started")
}
