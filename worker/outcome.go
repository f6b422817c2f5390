package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/attempt"
	"github.com/delayq/delayq/internal/guard"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/refusal"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

// reportProgress stores a progress report of the job whose handler's
// context is ctx (job.ReportProgress), fenced by its lease. One func for
// every job: the job's task is found in ctx, which derives from it.
func (w *Worker) reportProgress(ctx context.Context, p job.Progress) (time.Time, error) {
	t, ok := ctx.Value(taskKey{}).(*task)
	if !ok {
		return time.Time{}, errors.New("worker: progress reported from a context that is no job's")
	}
	return w.b.Progress(ctx, t.c.Lease, p)
}

// process runs one claimed job through the middleware chain and its handler
// and queues its outcome for the settler; t is forgotten once the outcome
// is recorded (record).
func (w *Worker) process(t *task) {
	var ctx context.Context = t
	claimedAt, c := t.claimedAt, t.c
	if c.Err != nil {
		// No handler or middleware sees it: there is no message to give,
		// or (its type unread by the claim) none that may run.
		logger := w.jobLogger(c)
		logger.Error().Err(c.Err).Msg("corrupt job; dead-lettering it unrun")
		op := kill(c, death(c, nil, c.Err), false)
		w.record(t, &op, job.Result{}, nil)
		return
	}
	// As c.Message() makes it, in the task: one allocation less per job.
	t.msg = job.Message{Envelope: *c.Envelope, Attempt: c.Attempt}
	m := &t.msg
	m.ClaimedAt = claimedAt
	entry, known := w.cfg.Registry.Table(registry.Key{}).Lookup(m.Type)
	// The handler's deadline: the job's, else its type's, else the
	// worker's. Only the message carries it; the stored envelope keeps
	// what the producer set.
	if m.Timeout <= 0 {
		m.Timeout = entry.Timeout
	}
	if m.Timeout <= 0 {
		m.Timeout = w.cfg.Timeout
	}
	var h job.Handler
	if known {
		h = w.chained(m.Type, entry.Handler)
	} else {
		// Middleware sees the attempt fail like any other.
		h = guard.Chain(job.HandlerFunc(func(context.Context, *job.Message) error {
			return fmt.Errorf("no handler registered for type %q", m.Type)
		}), w.cfg.Middleware...)
	}
	// The attempt keeps what the handler says of it (job.SetResult,
	// job.ReportProgress); settling it tells middleware what became of it
	// (job.OnResult).
	ctx, rec := attempt.With[job.Envelope, job.Result, job.Progress](t, w.report) // t is ctx, and tells reportProgress the lease
	t.attempt = rec
	var inner *handlerCtx // the context the handler ran with, for Options.Enqueue
	if len(w.cfg.Enqueue) > 0 {
		inner = &handlerCtx{ctx: ctx}
		ctx = context.WithValue(ctx, handlerCtxKey{}, inner)
	}
	err := call(ctx, h, m)
	if w.slots.released(t) {
		// Handed back at shutdown (the release forgets it); another worker
		// takes it.
		rec.Settle(job.Result{Outcome: job.OutcomeReleased, Err: err})
		return
	}
	if err != nil && errors.Is(context.Cause(ctx), ErrLeaseStale) && !errors.Is(err, ErrLeaseStale) {
		// Cancelled because its lease may have run out: say so in the
		// error recorded (if the lease was still this worker's).
		err = fmt.Errorf("%w: %w", ErrLeaseStale, err)
	}
	if err != nil && errors.Is(context.Cause(ctx), broker.ErrCancelled) {
		// Cancelled while it ran (Broker.Cancel): it ends here, in the
		// dead letters with the reason, and is not retried.
		d := death(c, m, fmt.Errorf("%w while running: %v", broker.ErrCancelled, err))
		d.Reason = broker.ReasonCancelled
		op := kill(c, d, false)
		w.record(t, &op, job.Result{Outcome: job.OutcomeDead, Err: err}, nil)
		return
	}
	if err == nil {
		op := protocol.Op{Kind: protocol.OpAck, Lease: c.Lease, Batch: batchOf(c), Remember: remember(c.Envelope, false)}
		if op.Retain = retain(c.Envelope, entry); op.Retain > 0 {
			result, _ := rec.Result()
			op.Done = &protocol.Done{Body: c.Body, Attempts: c.Attempt, StartedAt: claimedAt, Result: result, Progress: rec.Progress()}
		}
		next := slices.Concat(c.Envelope.Next, rec.Next())
		if len(next) > 0 && inner != nil {
			w.ackThrough(inner.ctx, c, m, entry, t, op, next)
			return
		}
		if len(next) > 0 {
			if op.Next, err = w.chain(ctx, c, next); err != nil {
				// Not acked: the attempt fails, and a later success
				// enqueues the next jobs (those enqueued already are
				// found pending or remembered).
				w.fail(c, m, entry, t, err)
				return
			}
		}
		w.record(t, &op, job.Result{Outcome: job.OutcomeSuccess}, nil)
		return
	}
	w.fail(c, m, entry, t, err)
}

// chain enqueues the next jobs of the succeeded job c that live in other
// shards and returns those of c's shard, for its ack (job.Then, job.Next).
// A next job the broker refuses is a permanent failure of c.
func (w *Worker) chain(ctx context.Context, c *protocol.Claimed, next []*job.Envelope) ([]*job.Envelope, error) {
	// The handler's deadline may have passed: the enqueue gets a lease's
	// worth of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
	defer cancel()
	here, err := w.b.Chain(ctx, c.Lease, c.Envelope, next)
	if err != nil {
		return nil, chainErr(err)
	}
	return here, nil
}

// chainErr is the failure of an attempt whose next jobs were not enqueued.
func chainErr(err error) error {
	err = fmt.Errorf("enqueue the next jobs: %w", err)
	if errors.Is(err, job.ErrInvalid) {
		return retry.Permanent(err)
	}
	return err
}

// errNotAcked is what Options.Enqueue's middleware is told of the next jobs
// of a job handed back at shutdown before its ack: not stored.
var errNotAcked = errors.New("worker: the job was handed back before its ack; its next jobs were not stored")

// ackThrough acks the succeeded job c with op, its next jobs going through
// Options.Enqueue with hctx, the context its handler ran with: the
// middleware sees them before they are stored, and learns which were once
// the ack is recorded. Those of c's shard are stored by the ack itself, so
// the innermost enqueuer enqueues those of other shards (Chain), records
// the ack and waits for it: a refused ack (the lease was lost) refuses
// them. A chain that fails, or middleware that refuses before the ack,
// fails the attempt, as without middleware.
func (w *Worker) ackThrough(hctx context.Context, c *protocol.Claimed, m *job.Message, entry typeEntry, t *task, op protocol.Op, next []*job.Envelope) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), w.cfg.Lease)
	defer cancel()
	// Copies, named as Chain names them (rules.ChainID): the middleware may
	// replace their headers, and sees the ids they are stored under.
	envs := make([]*job.Envelope, len(next))
	for i, e := range next {
		cp := *e
		if cp.ID == "" {
			cp.ID = rules.ChainID(c.ID, c.Envelope.CreatedAt, i+1)
		}
		envs[i] = &cp
	}
	recorded := false
	var chainFailure error
	inner := job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
		if recorded {
			return fmt.Errorf("worker: %w: the next jobs of job %q were enqueued already", job.ErrInvalid, c.ID)
		}
		here, err := w.b.Chain(ctx, c.Lease, c.Envelope, envs)
		if err != nil {
			chainFailure = err
			return err
		}
		op.Next = here
		recorded = true
		res := make(chan protocol.Settled, 1)
		if !w.record(t, &op, job.Result{Outcome: job.OutcomeSuccess}, func(r protocol.Settled) { res <- r }) {
			return refuseHere(envs, here, errNotAcked)
		}
		if r := <-res; r.Err != nil {
			return refuseHere(envs, here, r.Err)
		}
		return nil
	})
	err := job.ChainEnqueuer(inner, w.cfg.Enqueue...).Enqueue(ctx, envs...)
	if recorded {
		return // the ack's outcome is the attempt's; the middleware's error is its own
	}
	if chainFailure == nil {
		chainFailure = err
		if chainFailure == nil {
			chainFailure = fmt.Errorf("worker: Options.Enqueue did not pass the next jobs on")
		}
	}
	w.fail(c, m, entry, t, chainErr(chainFailure))
}

// refuseHere is the error of envs whose ack was not recorded (err): those
// in here (the ack's) were not stored; the others, of other shards, were.
func refuseHere(envs, here []*job.Envelope, err error) error {
	ids := make(map[string]bool, len(here))
	for _, e := range here {
		ids[e.Queue+"\n"+e.ID] = true
	}
	errs := make([]error, len(envs))
	for i, e := range envs {
		q := e.Queue
		if q == "" {
			q = naming.DefaultQueue
		}
		if ids[q+"\n"+e.ID] {
			errs[i] = err
		}
	}
	return &job.BatchError{Errs: errs}
}

// handlerCtx holds the context a handler ran with, inside the worker's
// middleware (Options.Enqueue sees the next jobs with it); handlerCtxKey is
// its key in the context the worker passes to the middleware.
type handlerCtx struct{ ctx context.Context }

type handlerCtxKey struct{}

// innermost records the context h runs with in the attempt's handlerCtx,
// when there is one.
func innermost(h job.Handler) job.Handler {
	return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		if hc, ok := ctx.Value(handlerCtxKey{}).(*handlerCtx); ok {
			hc.ctx = ctx
		}
		return h.Handle(ctx, m)
	})
}

// callbackCtx is ctx for the calls that may enqueue batch callbacks (a
// member's ending, the sweep): with Options.Enqueue, the callbacks go through
// it (broker.WithCallbackMiddleware), a repeat refused as a duplicate
// expected (internal/refusal).
func (w *Worker) callbackCtx(ctx context.Context) context.Context {
	if len(w.cfg.Enqueue) == 0 {
		return ctx
	}
	ctx = refusal.Expect(ctx, func(err error) bool { return errors.Is(err, broker.ErrDuplicate) })
	return broker.WithCallbackMiddleware(ctx, w.cfg.Enqueue...)
}

// chained returns the handler of a registered type wrapped in the worker's
// middleware, built once per type: the middleware is fixed once Run starts
// (Use), and a registered type's handler never changes, so each attempt
// need not allocate the chain's closures again.
func (w *Worker) chained(typ string, h job.Handler) job.Handler {
	if c, ok := w.chains.Load(typ); ok {
		return c.(job.Handler)
	}
	// Built under a lock, so that jobs of a new type starting together
	// wrap its handler once.
	w.chainMu.Lock()
	defer w.chainMu.Unlock()
	if c, ok := w.chains.Load(typ); ok {
		return c.(job.Handler)
	}
	if len(w.cfg.Enqueue) > 0 {
		h = innermost(h)
	}
	c := guard.Chain(h, w.cfg.Middleware...)
	w.chains.Store(typ, c)
	return c
}

// record marks t as settling (its outcome is decided, so a lease lost from
// now on is no surprise; its runner is free, and its lease is extended
// until the outcome is recorded) and queues op for the settler; once it is
// recorded, the attempt's OnResult callbacks get res (or
// OutcomeLeaseLost), then (when not nil) runs, and t is forgotten (see
// ended). A task handed back meanwhile (the shutdown deadline) records
// nothing: its release does.
func (w *Worker) record(t *task, op *protocol.Op, res job.Result, then func(protocol.Settled)) (queued bool) {
	if !w.slots.settle(t) {
		return false
	}
	t.result = res
	w.settler.add(op, settling{t: t, then: then})
	return true
}

// ended follows the recording of op, queued with e: r is its result, or
// the error that kept it from being recorded. A release failed is logged,
// and its task forgotten; an outcome refused because the lease was lost
// is logged, the attempt's OnResult callbacks get its result, e.then runs,
// and its task is forgotten.
func (w *Worker) ended(op *protocol.Op, e settling, r protocol.Settled) {
	t := e.t
	if t == nil || e.release {
		if r.Err != nil {
			w.log.Warn().Err(r.Err).Str("job_id", op.Lease.ID).Str("queue", op.Lease.Queue()).Msg("release failed; the job comes back after its lease")
		}
		if t != nil {
			w.slots.finish(t)
		}
		return
	}
	if errors.Is(r.Err, broker.ErrLeaseLost) {
		w.log.Warn().Str("job_id", op.Lease.ID).Str("queue", op.Lease.Queue()).Msg("outcome refused: lease lost; the job was or will be handled again")
	}
	if t.attempt != nil {
		t.attempt.Settle(settled(t.result, r.Err))
	}
	if e.then != nil {
		e.then(r)
	}
	w.slots.finish(t)
}

// typeEntry is what the worker's registry knows of a job type.
type typeEntry = registry.Entry[job.Handler, retry.Policy]

// decide decides a failed attempt of m (retrydecide.Decide with the job's policy).
func (w *Worker) decide(m *job.Message, entry typeEntry, err error) retrydecide.Decision {
	return retrydecide.Decide(m.Attempt, m.MaxRetries, rules.Policy(m, entry.Retry, w.cfg.Retry), err)
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
// job is corrupt (its envelope, if it decoded, still names the type).
func death(c *protocol.Claimed, m *job.Message, err error) protocol.Death {
	d := protocol.Death{Body: c.Body, Error: err.Error(), Attempts: c.Attempt}
	switch {
	case m != nil:
		d.Type, d.Attempts = m.Type, m.Attempt
	case c.Envelope != nil:
		d.Type = c.Envelope.Type
	}
	return d
}

// kill is the one way the worker dead-letters a job (retries spent,
// permanent, corrupt, cancelled while running, its lease run out): the
// ending carries the job's batch and how long its id is remembered, so
// that settle.lua records it (end_job) in every structure that waits for
// it, whatever the cause. expired marks the reaper's call.
func kill(c *protocol.Claimed, d protocol.Death, expired bool) protocol.Op {
	return protocol.Op{Kind: protocol.OpKill, Lease: c.Lease, Batch: batchOf(c), Death: d, Expired: expired, Remember: remember(c.Envelope, true)}
}

// remember is how long the id of a job that ended is remembered
// (job.Unique): after a success, and after a dead ending when the job asks
// for that too.
func remember(env *job.Envelope, dead bool) time.Duration {
	if env == nil || !env.Unique || (dead && !env.UniqueDead) {
		return 0
	}
	return env.UniqueFor
}

// fail retries or dead-letters a job whose attempt returned err, then
// settles the attempt. Per-job outcomes are logged at debug level here;
// middleware.Logging writes the outcome lines.
func (w *Worker) fail(c *protocol.Claimed, m *job.Message, entry typeEntry, t *task, err error) {
	logger := w.jobLogger(c)
	if _, ok := retrydecide.SnoozeDelay(err); ok && m.Snoozes >= retrydecide.MaxSnoozes {
		// The cap: this snooze is a failed attempt like any other.
		err = fmt.Errorf("snoozed %d times, the cap; last: %s", m.Snoozes, err.Error())
	}
	d := w.decide(m, entry, err)
	if d.Snooze {
		logger.Debug().Str("type", m.Type).Int64("delay_ms", d.Delay.Milliseconds()).Msg("job snoozed")
		env := *c.Envelope
		env.Snoozes++
		w.record(t, &protocol.Op{Kind: protocol.OpSnooze, Lease: c.Lease, Batch: batchOf(c), Delay: d.Delay, Env: &env},
			job.Result{Outcome: job.OutcomeRetry, Err: err, Delay: d.Delay}, nil)
		return
	}
	if d.Dead {
		logger.Debug().Err(err).Str("type", m.Type).Str("reason", d.Reason).Msg("job dead-lettered")
		op := kill(c, death(c, m, err), false)
		w.record(t, &op, job.Result{Outcome: job.OutcomeDead, Err: err}, nil)
		return
	}
	logger.Debug().Err(err).Str("type", m.Type).Int64("delay_ms", d.Delay.Milliseconds()).Msg("job failed; retrying")
	env := *c.Envelope // as stored: not the worker's defaults
	env.LastError = err.Error()
	w.record(t, &protocol.Op{Kind: protocol.OpRetry, Lease: c.Lease, Batch: batchOf(c), Delay: d.Delay, Env: &env},
		job.Result{Outcome: job.OutcomeRetry, Err: err, Delay: d.Delay}, nil)
}

// retain is how long a succeeded job is kept: its own Retain, else its
// type's.
func retain(env *job.Envelope, entry typeEntry) time.Duration {
	if env.Retain > 0 {
		return env.Retain
	}
	return entry.Retain
}

// batchOf is the batch c is a member of, "" for none (or when its
// envelope does not decode).
func batchOf(c *protocol.Claimed) string {
	if c.Envelope == nil {
		return ""
	}
	return c.Envelope.Batch
}

// settled is res, or OutcomeLeaseLost when recording it failed with lost.
func settled(res job.Result, lost error) job.Result {
	if lost == nil {
		return res
	}
	return job.Result{Outcome: job.OutcomeLeaseLost, Err: res.Err, Lost: lost}
}
