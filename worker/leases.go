package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// heartbeat extends the leases of running jobs; a job whose lease is lost
// gets its context cancelled.
func (w *Worker) heartbeat(bg context.Context) {
	w.unstall()
	leases := w.slots.held()
	if len(leases) == 0 {
		return
	}
	err := w.b.Extend(bg, w.cfg.Lease, leases...)
	var be *job.BatchError
	if !errors.As(err, &be) {
		if err != nil {
			w.log.Error().Err(err).Msg("heartbeat failed")
		}
		return
	}
	for i, e := range be.Errs {
		switch {
		case e == nil:
		case errors.Is(e, broker.ErrLeaseLost):
			if w.slots.lost(leases[i], broker.ErrLeaseLost) {
				w.log.Warn().Str("job_id", leases[i].ID).Str("queue", leases[i].Queue()).Msg("lease lost; cancelling the handler")
			}
		case errors.Is(e, broker.ErrCanceled):
			// The cancel notice was missed (or is on its way): the same
			// request, read from Redis.
			if w.slots.lost(leases[i], broker.ErrCanceled) {
				w.log.Info().Str("job_id", leases[i].ID).Str("queue", leases[i].Queue()).Msg("job cancelled; cancelling the handler")
			}
		default:
			w.log.Error().Err(e).Str("job_id", leases[i].ID).Msg("heartbeat failed")
		}
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
			if n, err := w.b.SweepBatches(bg, s, maxBatch); err != nil {
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
		return protocol.Op{Kind: protocol.OpKill, Lease: c.Lease, Batch: batchOf(c), Death: death(c, nil, c.Err), Expired: true, Remember: remember(c.Envelope, true)}
	}
	m := c.Message()
	if c.Cancelled {
		// Asked to stop while its worker died: cancelled, not retried.
		d := death(c, m, fmt.Errorf("%w while running; its worker stopped before it ended", broker.ErrCanceled))
		d.Reason = broker.ReasonCancelled
		return protocol.Op{Kind: protocol.OpKill, Lease: c.Lease, Batch: batchOf(c), Death: d, Expired: true}
	}
	m.Attempt = max(c.Attempt, 1)
	entry, _ := w.cfg.Registry.Lookup(m.Type)
	if d := w.decide(m, entry, ErrLeaseExpired); !d.Dead {
		env := *c.Envelope
		env.LastError = ErrLeaseExpired.Error()
		return protocol.Op{Kind: protocol.OpRetry, Lease: c.Lease, Batch: batchOf(c), Delay: d.Delay, Env: &env, Expired: true}
	}
	return protocol.Op{Kind: protocol.OpKill, Lease: c.Lease, Batch: batchOf(c), Death: death(c, m, ErrLeaseExpired), Expired: true, Remember: remember(c.Envelope, true)}
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
	back, gone := w.slots.trimLine(w.pace.depth(w.cfg))
	for _, t := range gone {
		t.cancel(nil)
		w.slots.finish(t)
	}
	if len(back) == 0 {
		return
	}
	leases := make([]protocol.Lease, len(back))
	for i, t := range back {
		leases[i] = t.lease
	}
	w.release(leases)
	for _, t := range back {
		t.cancel(nil)
		w.slots.finish(t)
	}
	w.log.Info().Int("released", len(back)).Msg("handlers slowed down: handed back prefetched jobs that had not started")
}
