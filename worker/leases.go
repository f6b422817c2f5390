package worker

import (
	"context"
	"errors"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// heartbeat extends the leases of running jobs; a job whose lease is lost
// gets its context cancelled.
func (w *Worker) heartbeat(bg context.Context) {
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
			w.log.Warn().Str("job_id", leases[i].ID).Str("queue", leases[i].Queue()).Msg("lease lost; cancelling the handler")
			w.slots.cancel(leases[i], broker.ErrLeaseLost)
		default:
			w.log.Error().Err(e).Str("job_id", leases[i].ID).Msg("heartbeat failed")
		}
	}
}

// reap retries or dead-letters the jobs of expired leases in every shard of
// every queue.
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
					w.log.Warn().Str("queue", q.Name).Strs("job_ids", res.Orphans).Msg("removed processing ids without an envelope or lease")
				}
				for i := range res.Jobs {
					w.expire(bg, &res.Jobs[i])
				}
				if len(res.Jobs) < maxBatch {
					break
				}
			}
		}
	}
}

// expire handles one job whose lease ran out, as a failed attempt.
func (w *Worker) expire(bg context.Context, c *protocol.Claimed) {
	logger := w.jobLogger(c)
	var err error
	var outcome job.Outcome
	if c.Err != nil {
		_, err = w.b.Kill(bg, c.Lease, death(c, nil, c.Err), true)
		outcome = job.OutcomeDead
	} else {
		m := c.Message()
		logger = logger.With().Str("type", m.Type).Logger()
		m.Attempt = max(c.Attempt, 1)
		entry, _ := w.cfg.Registry.Lookup(m.Type)
		if d := w.decide(m, entry, ErrLeaseExpired); d.Dead {
			_, err = w.b.Kill(bg, c.Lease, death(c, m, ErrLeaseExpired), true)
			outcome = job.OutcomeDead
		} else {
			env := m.Envelope
			env.LastError = ErrLeaseExpired.Error()
			_, err = w.b.Retry(bg, c.Lease, d.Delay, &env, true)
			outcome = job.OutcomeRetry
		}
	}
	switch {
	case err == nil:
		logger.Warn().Str("outcome", outcome.String()).Msg("lease expired; job reaped")
	case errors.Is(err, broker.ErrLeaseLost), errors.Is(err, broker.ErrLeaseLive):
		logger.Debug().Err(err).Msg("reap skipped")
	default:
		logger.Error().Err(err).Msg("reap failed; next round tries again")
	}
}
