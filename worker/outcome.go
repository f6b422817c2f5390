package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

// process runs one claimed job through the middleware chain and its handler
// and records the outcome.
func (w *Worker) process(ctx context.Context, claimedAt time.Time, c *protocol.Claimed, t *task) {
	defer w.slots.finish(t)
	// Outcomes are recorded even after the handler's context is cancelled.
	bg := context.WithoutCancel(ctx)
	if c.Err != nil {
		// No handler or middleware sees it: there is no message to give.
		logger := w.jobLogger(c)
		logger.Error().Err(c.Err).Msg("envelope does not decode; dead-lettering")
		w.persist(bg, c.Lease, "kill", func(ctx context.Context) error {
			_, err := w.b.Kill(ctx, c.Lease, death(c, nil, c.Err), false)
			return err
		})
		return
	}
	m := c.Message()
	m.ClaimedAt = claimedAt
	entry, known := w.cfg.Registry.Lookup(m.Type)
	if m.Timeout <= 0 {
		m.Timeout = entry.Timeout
	}
	if m.Timeout <= 0 {
		m.Timeout = w.cfg.Timeout
	}
	h := entry.Handler
	if !known {
		// Middleware sees the attempt fail like any other.
		h = job.HandlerFunc(func(context.Context, *job.Message) error {
			return fmt.Errorf("no handler registered for type %q", m.Type)
		})
	}
	// settle tells middleware what became of the attempt (job.OnResult).
	ctx, settle := job.WithResults(ctx)
	err := call(ctx, job.Chain(h, w.cfg.Middleware...), m)
	if w.slots.released(t) {
		// Handed back at shutdown; another worker takes it.
		settle(job.Result{Outcome: job.OutcomeReleased, Err: err})
		return
	}
	if err == nil {
		w.acks.add(t.lease, settle)
		return
	}
	w.fail(bg, c, m, entry, err, settle)
}

// decide decides a failed attempt of m (retry.Decide with the job's policy).
func (w *Worker) decide(m *job.Message, entry job.Entry, err error) retry.Decision {
	return retry.Decide(m.Attempt, m.MaxRetries, w.policy(m, entry), err)
}

// policy is the retry policy of a job: its own backoff, else its type's,
// else the worker's.
func (w *Worker) policy(m *job.Message, entry job.Entry) retry.Policy {
	switch {
	case m.Backoff != nil:
		return retry.Exponential{Initial: m.Backoff.Initial, Multiplier: m.Backoff.Multiplier, Max: m.Backoff.Max, Jitter: m.Backoff.Jitter}
	case entry.Retry != nil:
		return entry.Retry
	}
	return w.cfg.Retry
}

// jobLogger returns the logger for one job's outcome. It is built only when
// there is something to log: a success logs nothing, and building it costs
// allocations on the hot path.
func (w *Worker) jobLogger(c *protocol.Claimed) zerolog.Logger {
	return w.log.With().Str("job_id", c.ID).Str("queue", c.Queue()).Int("attempt", c.Attempt).Logger()
}

// call runs h, turning a panic that escaped the middleware into an error.
func call(ctx context.Context, h job.Handler, m *job.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &middleware.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, m)
}

// death is the one place a dead job's record is made: m is nil when the
// envelope did not decode.
func death(c *protocol.Claimed, m *job.Message, err error) protocol.Death {
	d := protocol.Death{Body: c.Body, Error: err.Error(), Attempts: c.Attempt}
	if m != nil {
		d.Type, d.Attempts = m.Type, m.Attempt
	}
	return d
}

// fail retries or dead-letters a job whose attempt returned err, then
// settles the attempt. Per-job outcomes are logged at debug level here;
// middleware.Logging writes the outcome lines.
func (w *Worker) fail(bg context.Context, c *protocol.Claimed, m *job.Message, entry job.Entry, err error, settle func(job.Result)) {
	logger := w.jobLogger(c)
	d := w.decide(m, entry, err)
	if d.Dead {
		logger.Debug().Err(err).Str("type", m.Type).Str("reason", d.Reason).Msg("job dead-lettered")
		lost := w.persist(bg, c.Lease, "kill", func(ctx context.Context) error {
			_, err := w.b.Kill(ctx, c.Lease, death(c, m, err), false)
			return err
		})
		settle(settled(job.Result{Outcome: job.OutcomeDead, Err: err}, lost))
		return
	}
	logger.Debug().Err(err).Str("type", m.Type).Int64("delay_ms", d.Delay.Milliseconds()).Msg("job failed; retrying")
	env := m.Envelope
	env.LastError = err.Error()
	lost := w.persist(bg, c.Lease, "retry", func(ctx context.Context) error {
		_, err := w.b.Retry(ctx, c.Lease, d.Delay, &env, false)
		return err
	})
	settle(settled(job.Result{Outcome: job.OutcomeRetry, Err: err, Delay: d.Delay}, lost))
}

// settled is res, or OutcomeLeaseLost when recording it failed with lost.
func settled(res job.Result, lost error) job.Result {
	if lost == nil {
		return res
	}
	return job.Result{Outcome: job.OutcomeLeaseLost, Err: res.Err, Lost: lost}
}

// persist runs a state change, retrying Redis errors with backoff for as
// long as the lease could still be held. A lost lease ends it at once: the
// job is someone else's. If it never succeeds the job is redelivered after
// its lease, so nothing is lost; the last error is returned.
func (w *Worker) persist(ctx context.Context, l protocol.Lease, what string, op func(context.Context) error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 20 * time.Millisecond
	b.MaxInterval = time.Second
	b.MaxElapsedTime = w.cfg.Lease
	err := backoff.Retry(func() error {
		err := op(ctx)
		if errors.Is(err, broker.ErrLeaseLost) || errors.Is(err, broker.ErrLeaseLive) {
			return backoff.Permanent(err)
		}
		if err != nil {
			w.log.Warn().Err(err).Str("job_id", l.ID).Str("queue", l.Queue()).Msg(what + " failed; trying again")
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil {
		w.log.Warn().Err(err).Str("job_id", l.ID).Str("queue", l.Queue()).Msg(what + " not recorded; the job comes back after its lease")
	}
	return err
}
