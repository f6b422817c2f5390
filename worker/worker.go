package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

// ErrLeaseExpired is the error recorded for a job whose worker did not
// finish it within its lease (the worker crashed, hung or lost Redis).
var ErrLeaseExpired = errors.New("worker: lease expired before the job finished")

// Worker handles jobs. Build one with New and call Run.
type Worker struct {
	cfg     Config
	log     zerolog.Logger
	running atomic.Bool

	mu       sync.Mutex
	inflight map[broker.Lease]*task
	free     int
	freed    chan struct{} // a slot freed (buffered 1)
	idle     chan struct{} // closed by the task that empties inflight during shutdown
	closing  bool

	ackMu   sync.Mutex
	pending []acking
	ackSig  chan struct{} // pending grew (buffered 1)
}

// acking is a lease waiting for the acker and the attempt's settle function.
type acking struct {
	lease  broker.Lease
	settle func(job.Result)
}

type task struct {
	lease    broker.Lease
	cancel   context.CancelCauseFunc
	released bool // handed back at shutdown: its outcome is not recorded
}

// New checks cfg, fills in its defaults and returns a Worker.
func New(cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Worker{
		cfg:      cfg,
		log:      *cfg.Logger,
		inflight: make(map[broker.Lease]*task),
		free:     cfg.Concurrency,
		freed:    make(chan struct{}, 1),
		ackSig:   make(chan struct{}, 1),
	}, nil
}

// Use appends middleware to the worker's handler chain, inside
// Config.Middleware: with the default chain a job runs through Recover, then
// Timeout, then the middleware given to Use in order, then its handler. To
// order Recover and Timeout yourself, set Config.Middleware to an empty
// slice and pass them to Use as well:
//
//	w.Use(middleware.Recover(), middleware.Tracing(), middleware.Metrics(),
//		middleware.Logging(logger), middleware.Timeout(0))
//
// Use must be called before Run; it panics when called after, or with a nil
// middleware.
func (w *Worker) Use(mws ...job.Middleware) {
	if w.running.Load() {
		panic("worker: Use called after Run")
	}
	for i, mw := range mws {
		if mw == nil {
			panic(fmt.Sprintf("worker: Use: middleware %d of %d is nil", i+1, len(mws)))
		}
	}
	w.cfg.Middleware = append(w.cfg.Middleware[:len(w.cfg.Middleware):len(w.cfg.Middleware)], mws...)
}

// Run handles jobs until ctx is cancelled, then shuts down gracefully (see
// the package doc) and returns nil. It returns an error at once if the
// worker is already running.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	names := make([]string, len(w.cfg.Queues))
	for i, q := range w.cfg.Queues {
		names[i] = q.Name
	}
	w.log.Info().Strs("queues", names).Int("concurrency", w.cfg.Concurrency).Int64("lease_ms", w.cfg.Lease.Milliseconds()).Msg("worker started")

	// bg outlives ctx: it carries acks, retries and releases of the shutdown.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	// jobs is the parent of every handler context; cancelled at the deadline.
	jobs, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()

	notices, unsubscribe := w.cfg.Broker.Wakeups(bg, names)
	defer unsubscribe()

	// The heartbeat keeps running through the shutdown wait; the reaper and
	// the fetcher stop with ctx.
	hb, stopHB := context.WithCancel(bg)
	var loops sync.WaitGroup
	stopAck, ackerDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(ackerDone); w.acker(bg, stopAck) }()
	if w.cfg.HeartbeatInterval > 0 {
		loops.Go(func() { w.every(hb, w.cfg.HeartbeatInterval, func() { w.heartbeat(bg) }) })
	}
	if w.cfg.ReapInterval > 0 {
		loops.Go(func() { w.every(ctx, w.cfg.ReapInterval, func() { w.reap(ctx, bg) }) })
	}
	loops.Go(func() { w.checkEviction(ctx) })

	var handlers sync.WaitGroup
	w.fetch(ctx, jobs, notices, &handlers)
	w.shutdown(bg, cancelJobs, &handlers)
	stopHB()
	loops.Wait()
	close(stopAck)
	<-ackerDone
	w.log.Info().Msg("worker stopped")
	return nil
}

// every runs f every d (with ±10 % jitter so that workers spread out) until
// ctx is done.
func (w *Worker) every(ctx context.Context, d time.Duration, f func()) {
	for {
		jittered := d + time.Duration((rand.Float64()-0.5)*0.2*float64(d))
		t := time.NewTimer(jittered)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			f()
		}
	}
}

func (w *Worker) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fetch claims jobs for free slots until ctx is done.
func (w *Worker) fetch(ctx, jobs context.Context, notices <-chan string, handlers *sync.WaitGroup) {
	var failures int
	for ctx.Err() == nil {
		w.mu.Lock()
		free := w.free
		w.mu.Unlock()
		if free == 0 {
			select {
			case <-ctx.Done():
			case <-w.freed:
			}
			continue
		}
		wait := w.cfg.MaxIdle
		for _, q := range w.order() {
			if free == 0 || ctx.Err() != nil {
				break
			}
			n := min(free, w.cfg.BatchSize)
			res, err := w.cfg.Broker.Claim(ctx, q, n, w.cfg.Lease)
			if err != nil {
				if ctx.Err() == nil {
					failures++
					w.log.Error().Err(err).Str("queue", q).Msg("claim failed")
					wait = min(wait, errorBackoff(failures))
				}
				continue
			}
			failures = 0
			if len(res.Orphans) > 0 {
				w.log.Warn().Str("queue", q).Strs("job_ids", res.Orphans).Msg("removed scheduled ids without an envelope")
			}
			for i := range res.Jobs {
				w.start(jobs, res.Now, &res.Jobs[i], handlers)
			}
			free -= len(res.Jobs)
			switch {
			case len(res.Jobs) == n:
				wait = 0 // there may be more due
			case !res.Next.IsZero():
				wait = min(wait, max(res.Next.Sub(res.Now), 0))
			}
		}
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-notices:
		}
		t.Stop()
	}
}

func errorBackoff(failures int) time.Duration {
	return min(50*time.Millisecond<<min(failures, 6), 2*time.Second)
}

// order returns the queue names in the order to try them this round.
func (w *Worker) order() []string {
	qs := w.cfg.Queues
	out := make([]string, 0, len(qs))
	if w.cfg.StrictPriority || len(qs) == 1 {
		for _, q := range qs {
			out = append(out, q.Name)
		}
		return out
	}
	// Weighted sampling without replacement (Efraimidis–Spirakis keys).
	type keyed struct {
		name string
		key  float64
	}
	ks := make([]keyed, len(qs))
	for i, q := range qs {
		ks[i] = keyed{q.Name, -rand.ExpFloat64() / float64(q.Weight)}
	}
	for len(ks) > 0 {
		best := 0
		for i := range ks {
			if ks[i].key > ks[best].key {
				best = i
			}
		}
		out = append(out, ks[best].name)
		ks = append(ks[:best], ks[best+1:]...)
	}
	return out
}

// start runs one claimed job in a goroutine of its own.
func (w *Worker) start(jobs context.Context, claimedAt time.Time, c *broker.Claimed, handlers *sync.WaitGroup) {
	ctx, cancel := context.WithCancelCause(jobs)
	t := &task{lease: c.Lease, cancel: cancel}
	w.mu.Lock()
	w.inflight[c.Lease] = t
	w.free--
	w.mu.Unlock()
	handlers.Go(func() {
		defer cancel(nil)
		w.process(ctx, claimedAt, c, t)
	})
}

// finish forgets a task and frees its slot.
func (w *Worker) finish(t *task) {
	w.mu.Lock()
	delete(w.inflight, t.lease)
	w.free++
	if w.closing && len(w.inflight) == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
	w.mu.Unlock()
	w.signal(w.freed)
}

// released reports whether t was handed back at shutdown.
func (w *Worker) released(t *task) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return t.released
}

func (w *Worker) process(ctx context.Context, claimedAt time.Time, c *broker.Claimed, t *task) {
	defer w.finish(t)
	// Outcomes are recorded even after the handler's context is cancelled.
	bg := context.WithoutCancel(ctx)
	if c.Err != nil {
		// No handler or middleware sees it: there is no message to give.
		logger := w.jobLogger(c)
		logger.Error().Err(c.Err).Msg("envelope does not decode; dead-lettering")
		rec := &broker.DeadRecord{Body: c.Body, Error: c.Err.Error(), Attempts: c.Attempt}
		w.persist(bg, c.Lease, "kill", func(ctx context.Context) error {
			_, err := w.cfg.Broker.Kill(ctx, c.Lease, rec)
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
	err := w.call(ctx, job.Chain(h, w.cfg.Middleware...), m)
	if w.released(t) {
		// Handed back at shutdown; another worker takes it.
		settle(job.Result{Outcome: job.OutcomeReleased, Err: err})
		return
	}
	if err == nil {
		w.ack(t.lease, settle)
		return
	}
	w.fail(bg, w.jobLogger(c), c, m, entry.Retry, err, settle)
}

// jobLogger returns the logger for one job's outcome. It is built only when
// there is something to log: a success logs nothing, and building it costs
// allocations on the hot path.
func (w *Worker) jobLogger(c *broker.Claimed) zerolog.Logger {
	return w.log.With().Str("job_id", c.ID).Str("queue", c.Queue).Int("attempt", c.Attempt).Logger()
}

// call runs h, turning a panic that escaped the middleware into an error.
func (w *Worker) call(ctx context.Context, h job.Handler, m *job.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &middleware.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, m)
}

// fail retries or dead-letters a job whose attempt returned err, then
// settles the attempt. Per-job outcomes are logged at debug level here;
// middleware.Logging writes the outcome lines.
func (w *Worker) fail(bg context.Context, logger zerolog.Logger, c *broker.Claimed, m *job.Message, policy retry.Policy, err error, settle func(job.Result)) {
	dead, delay := w.decide(m, policy, err)
	if dead {
		logger.Debug().Err(err).Str("type", m.Type).Msg("job dead-lettered")
		rec := &broker.DeadRecord{Type: m.Type, Body: c.Body, Error: err.Error(), Attempts: m.Attempt}
		lost := w.persist(bg, c.Lease, "kill", func(ctx context.Context) error {
			_, err := w.cfg.Broker.Kill(ctx, c.Lease, rec)
			return err
		})
		settle(settled(job.Result{Outcome: job.OutcomeDead, Err: err}, lost))
		return
	}
	logger.Debug().Err(err).Str("type", m.Type).Int64("delay_ms", delay.Milliseconds()).Msg("job failed; retrying")
	env := m.Envelope
	env.LastError = err.Error()
	lost := w.persist(bg, c.Lease, "retry", func(ctx context.Context) error {
		_, err := w.cfg.Broker.Retry(ctx, c.Lease, delay, &env)
		return err
	})
	settle(settled(job.Result{Outcome: job.OutcomeRetry, Err: err, Delay: delay}, lost))
}

// settled is res, or OutcomeLeaseLost when recording it failed with lost.
func settled(res job.Result, lost error) job.Result {
	if lost == nil {
		return res
	}
	return job.Result{Outcome: job.OutcomeLeaseLost, Err: res.Err, Lost: lost}
}

// decide says whether a failed attempt is the job's last, and if not, how
// long until the next.
func (w *Worker) decide(m *job.Message, policy retry.Policy, err error) (dead bool, delay time.Duration) {
	if retry.IsPermanent(err) || m.Attempt > m.MaxRetries {
		return true, 0
	}
	if d, ok := retry.AfterDelay(err); ok {
		return false, d
	}
	switch {
	case m.Backoff != nil:
		policy = retry.Exponential{Initial: m.Backoff.Initial, Multiplier: m.Backoff.Multiplier, Max: m.Backoff.Max, Jitter: m.Backoff.Jitter}
	case policy == nil:
		policy = w.cfg.Retry
	}
	return false, policy.Delay(m.Attempt)
}

// persist runs a state change, retrying Redis errors with backoff for as
// long as the lease could still be held. A lost lease ends it at once: the
// job is someone else's. If it never succeeds the job is redelivered after
// its lease, so nothing is lost; the last error is returned.
func (w *Worker) persist(ctx context.Context, l broker.Lease, what string, op func(context.Context) error) error {
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
			w.log.Warn().Err(err).Str("job_id", l.ID).Str("queue", l.Queue).Msg(what + " failed; trying again")
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil {
		w.log.Warn().Err(err).Str("job_id", l.ID).Str("queue", l.Queue).Msg(what + " not recorded; the job comes back after its lease")
	}
	return err
}

// ack queues a lease for the acker, which batches them and settles the
// attempt.
func (w *Worker) ack(l broker.Lease, settle func(job.Result)) {
	w.ackMu.Lock()
	w.pending = append(w.pending, acking{l, settle})
	w.ackMu.Unlock()
	w.signal(w.ackSig)
}

// acker acknowledges queued leases, as many per call as have gathered (up
// to maxBatch), until stop is closed; then it flushes what is pending.
func (w *Worker) acker(bg context.Context, stop <-chan struct{}) {
	for {
		var stopping bool
		select {
		case <-w.ackSig:
		case <-stop:
			stopping = true
		}
		for {
			w.ackMu.Lock()
			batch := w.pending
			if len(batch) > maxBatch {
				batch = batch[:maxBatch:maxBatch]
				w.pending = w.pending[maxBatch:]
			} else {
				w.pending = nil
			}
			w.ackMu.Unlock()
			if len(batch) == 0 {
				break
			}
			w.ackBatch(bg, batch)
		}
		if stopping {
			return
		}
	}
}

// ackBatch acks leases, retrying the ones that failed for a Redis error,
// and settles each attempt.
func (w *Worker) ackBatch(bg context.Context, batch []acking) {
	todo := batch
	leases := make([]broker.Lease, len(batch))
	err := w.persist(bg, batch[0].lease, "ack", func(ctx context.Context) error {
		leases = leases[:0]
		for _, a := range todo {
			leases = append(leases, a.lease)
		}
		err := w.cfg.Broker.Ack(ctx, leases...)
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
				w.log.Warn().Str("job_id", todo[i].lease.ID).Str("queue", todo[i].lease.Queue).Msg("ack refused: lease lost; the job was or will be handled again")
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

// heartbeat extends the leases of running jobs; a job whose lease is lost
// gets its context cancelled.
func (w *Worker) heartbeat(bg context.Context) {
	w.mu.Lock()
	leases := make([]broker.Lease, 0, len(w.inflight))
	for l, t := range w.inflight {
		if !t.released {
			leases = append(leases, l)
		}
	}
	w.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	err := w.cfg.Broker.Extend(bg, w.cfg.Lease, leases...)
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
			w.log.Warn().Str("job_id", leases[i].ID).Str("queue", leases[i].Queue).Msg("lease lost; cancelling the handler")
			w.mu.Lock()
			if t, ok := w.inflight[leases[i]]; ok {
				t.cancel(broker.ErrLeaseLost)
			}
			w.mu.Unlock()
		default:
			w.log.Error().Err(e).Str("job_id", leases[i].ID).Msg("heartbeat failed")
		}
	}
}

// reap retries or dead-letters the jobs of expired leases in every queue.
func (w *Worker) reap(ctx, bg context.Context) {
	for _, q := range w.cfg.Queues {
		for ctx.Err() == nil {
			res, err := w.cfg.Broker.Reap(bg, q.Name, maxBatch)
			if err != nil {
				w.log.Error().Err(err).Str("queue", q.Name).Msg("reap failed")
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

// expire handles one job whose lease ran out, as a failed attempt.
func (w *Worker) expire(bg context.Context, c *broker.Claimed) {
	logger := w.jobLogger(c)
	var err error
	var outcome string
	if c.Err != nil {
		rec := &broker.DeadRecord{Body: c.Body, Error: c.Err.Error(), Attempts: c.Attempt}
		_, err = w.cfg.Broker.KillExpired(bg, c.Lease, rec)
		outcome = job.OutcomeDead.String()
	} else {
		m := c.Message()
		logger = logger.With().Str("type", m.Type).Logger()
		m.Attempt = max(c.Attempt, 1)
		entry, _ := w.cfg.Registry.Lookup(m.Type)
		dead, delay := w.decide(m, entry.Retry, ErrLeaseExpired)
		if dead {
			rec := &broker.DeadRecord{Type: m.Type, Body: c.Body, Error: ErrLeaseExpired.Error(), Attempts: m.Attempt}
			_, err = w.cfg.Broker.KillExpired(bg, c.Lease, rec)
			outcome = job.OutcomeDead.String()
		} else {
			env := m.Envelope
			env.LastError = ErrLeaseExpired.Error()
			_, err = w.cfg.Broker.RetryExpired(bg, c.Lease, delay, &env)
			outcome = job.OutcomeRetry.String()
		}
	}
	switch {
	case err == nil:
		logger.Warn().Str("outcome", outcome).Msg("lease expired; job reaped")
	case errors.Is(err, broker.ErrLeaseLost), errors.Is(err, broker.ErrLeaseLive):
		logger.Debug().Err(err).Msg("reap skipped")
	default:
		logger.Error().Err(err).Msg("reap failed; next round tries again")
	}
}

// shutdown waits for in-flight jobs until the deadline, then cancels and
// releases the rest.
func (w *Worker) shutdown(bg context.Context, cancelJobs context.CancelFunc, handlers *sync.WaitGroup) {
	w.mu.Lock()
	w.closing = true
	idle := make(chan struct{})
	if len(w.inflight) == 0 {
		close(idle)
	} else {
		w.idle = idle
	}
	n := len(w.inflight)
	w.mu.Unlock()
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
	w.mu.Lock()
	var leases []broker.Lease
	for l, t := range w.inflight {
		t.released = true
		leases = append(leases, l)
	}
	w.mu.Unlock()
	cancelJobs()
	if len(leases) > 0 {
		err := w.cfg.Broker.Release(bg, leases...)
		if err != nil {
			w.log.Error().Err(err).Msg("release failed; those jobs come back after their lease")
		}
		w.log.Warn().Int("released", len(leases)).Msg("shutdown deadline passed: released unfinished jobs")
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
