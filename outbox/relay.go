package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// Broker is what the relay needs of the broker. *broker.Broker implements
// it.
type Broker interface {
	// Enqueue stores envelopes, as broker.Broker.Enqueue: nil, the error of
	// the one envelope, or a *job.BatchError aligned with envs.
	Enqueue(ctx context.Context, envs ...*job.Envelope) error
	// Cancel cancels a job, as broker.Broker.Cancel: a waiting job is
	// removed, a running one asked to stop.
	Cancel(ctx context.Context, queue, id string) (job.Cancelled, error)
}

var _ Broker = (*broker.Broker)(nil)

// RelayOptions configure a Relay. The zero value is usable: every field
// has a documented default.
type RelayOptions struct {
	// BatchSize is how many rows one batch moves: one SELECT, one
	// broker.Enqueue call for the jobs among them, one DELETE. 0 means 500;
	// at most 10,000.
	BatchSize int

	// PollInterval is how long the relay sleeps when the outbox is empty.
	// [Relay.Notify] wakes it early. 0 means 1s.
	PollInterval time.Duration

	// BatchTimeout bounds the broker calls of one batch (and, three times
	// over, the whole batch with its transaction). On SQLite the relay
	// holds the database's write lock meanwhile: while Redis does not
	// answer, up to this long per try. 0 means 5s.
	BatchTimeout time.Duration

	// MinBackoff and MaxBackoff bound the wait after a failed batch
	// (database or Redis down): exponential with jitter, from MinBackoff,
	// doubling up to MaxBackoff, reset by a batch that succeeds. 0 means
	// 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration

	// MeterProvider provides the relay's meter. nil means the global one
	// (otel.GetMeterProvider) at the time Run starts.
	MeterProvider metric.MeterProvider

	// Logger receives a line per failed batch and per failed row. nil
	// means none.
	Logger *zerolog.Logger

	// OnCancel, when set, is called with the outcome of every cancel the
	// relay applied to Redis: nil (the job was removed), an error wrapping
	// broker.ErrNotFound (no such job: it finished, never reached Redis, or
	// was cancelled already) or broker.ErrInProgress (a worker runs it; it
	// was asked to stop, as broker.Broker.Cancel does). It is called after
	// the cancel row is deleted, from Run's goroutine; a relay that crashes
	// in between applies the cancel again, so it may be called twice for
	// one row.
	OnCancel func(queue, id string, err error)

	// ReplayWindow is how long the broker remembers the id of a relayed
	// job after it succeeded (job.Unique's window, set on every envelope
	// the relay enqueues, or raised to this on one that is Unique with a
	// shorter window), so that a replay of its row — a relay that died
	// after Redis accepted the batch and before the row's delete
	// committed — is refused as a duplicate instead of running the job
	// again. It also refuses, for that long, a new job with the id that
	// carries Unique (every job relayed by an outbox does). It costs about
	// 100 bytes of Redis memory per job for the window (docs/outbox.md).
	// 0 means 1h; negative means none: a replay after the job ended runs
	// it again.
	ReplayWindow time.Duration

	// Name names the relay in the status it records in Redis (shown by
	// `delayq stats` and the dashboard): printable, at most 200 bytes. Relays of one namespace
	// need distinct names. "" means the host name and process id
	// ("host:1234", "host:1234#2" for the second relay made in the
	// process).
	Name string

	// StatusInterval is how often the relay records its status (lag,
	// pending and failed rows, rows relayed, last error) in Redis, under
	// the broker's namespace, while Run runs, for `delayq stats` and the dashboard. It is
	// recorded when the Broker has a Redis client and namespace, as
	// *broker.Broker has (methods Client and Namespace). 0 means 2s;
	// negative means never.
	StatusInterval time.Duration

	// ProcessTTL is how long the relay's entry in the process registry
	// (package fleet: `delayq workers ls`, the dashboard's processes page)
	// lives after each of its heartbeats, which come every ProcessTTL/3
	// while Run runs, so that a relay killed with SIGKILL is gone from the
	// list ProcessTTL after its last one. Registered when the Broker has a
	// Redis client and namespace, as for StatusInterval. 0 means 15 s; at
	// least 100 ms; negative: not registered.
	ProcessTTL time.Duration
}

// Defaults and limits of RelayOptions, stated in its field docs.
const (
	defaultBatchSize    = 500
	maxBatchSize        = 10_000
	defaultPollInterval = time.Second
	defaultBatchTimeout = 5 * time.Second
	defaultMinBackoff   = 100 * time.Millisecond
	defaultMaxBackoff   = 10 * time.Second
	defaultReplayWindow = time.Hour
)

// Metric names, after those of the middleware package. The gauges are
// observed while Run runs; all carry the label table. docs/outbox.md lists
// every name (TestNamesInDocs).
const (
	metricLag     = "delayq.outbox.lag"     // gauge s: how long the oldest unrelayed row has waited
	metricPending = "delayq.outbox.pending" // gauge {row}: rows waiting for the relay
	metricFailed  = "delayq.outbox.failed"  // gauge {row}: rows marked failed, skipped by the relay
	metricRelayed = "delayq.outbox.relayed" // counter {row}: rows relayed and deleted; label outcome
)

// Metric label keys and the outcomes of metricRelayed.
const (
	labelTable   = attribute.Key("table")
	labelOutcome = attribute.Key("outcome")

	outcomeEnqueued   = "enqueued"    // the job was stored in Redis
	outcomeDuplicate  = "duplicate"   // its id was pending in Redis already (a replay)
	outcomeCancelled  = "cancelled"   // a cancel removed the job from Redis
	outcomeNotFound   = "not_found"   // a cancel found no job
	outcomeInProgress = "in_progress" // a cancel found the job running: its worker was asked to stop
	outcomeFailed     = "failed"      // the row was marked failed
	outcomeExpired    = "expired"     // the job's expiry passed while it waited in the outbox: deleted, never enqueued
)

// scopeName is the instrumentation scope of the relay's meter.
const scopeName = "github.com/delayq/delayq/outbox"

// Relay moves committed outbox rows to Redis. Run it in one goroutine per
// Relay; on PostgreSQL any number of relays (in as many processes) may run
// on one table, on SQLite one.
type Relay struct {
	o    *Outbox
	b    Broker
	opts RelayOptions
	log  zerolog.Logger
	wake chan struct{}

	selectBatch string
	markFailed  string
	anyPending  string

	running atomic.Bool
	stats   relayCounters
	status  status
}

// NewRelay returns a relay of o's rows to b. It checks the options but
// contacts neither the database nor Redis.
func NewRelay(o *Outbox, b Broker, opts RelayOptions) (*Relay, error) {
	switch {
	case o == nil:
		return nil, invalid("nil Outbox")
	case b == nil:
		return nil, invalid("nil Broker")
	case opts.BatchSize < 0 || opts.BatchSize > maxBatchSize:
		return nil, invalid("batch size %d is out of range [0, %d]", opts.BatchSize, maxBatchSize)
	case opts.PollInterval < 0, opts.BatchTimeout < 0, opts.MinBackoff < 0, opts.MaxBackoff < 0:
		return nil, invalid("PollInterval %s, BatchTimeout %s, MinBackoff %s and MaxBackoff %s must not be negative",
			opts.PollInterval, opts.BatchTimeout, opts.MinBackoff, opts.MaxBackoff)
	}
	opts.BatchSize = cmp.Or(opts.BatchSize, defaultBatchSize)
	opts.PollInterval = cmp.Or(opts.PollInterval, defaultPollInterval)
	opts.BatchTimeout = cmp.Or(opts.BatchTimeout, defaultBatchTimeout)
	opts.MinBackoff = cmp.Or(opts.MinBackoff, defaultMinBackoff)
	opts.MaxBackoff = cmp.Or(opts.MaxBackoff, defaultMaxBackoff)
	opts.ReplayWindow = cmp.Or(opts.ReplayWindow, defaultReplayWindow)
	if opts.ProcessTTL > 0 && opts.ProcessTTL < fleetreg.MinTTL {
		return nil, invalid("ProcessTTL %s is below the minimum %s (negative: not registered)", opts.ProcessTTL, fleetreg.MinTTL)
	}
	if opts.MaxBackoff < opts.MinBackoff {
		return nil, invalid("MaxBackoff %s is below MinBackoff %s", opts.MaxBackoff, opts.MinBackoff)
	}
	if err := checkName(opts.Name); err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = defaultName()
	}
	r := &Relay{o: o, b: b, opts: opts, log: zerolog.Nop(), wake: make(chan struct{}, 1), status: statusFor(b, opts.StatusInterval)}
	if opts.Logger != nil {
		r.log = *opts.Logger
	}
	d, name := o.d, o.t.full()
	// A row waits while an older row of the same job is pending, so that
	// the rows of one job reach Redis in the order they were written, even
	// with several relays; a batch therefore holds one row per job.
	r.selectBatch = fmt.Sprintf(`SELECT o.seq, o.op, o.queue, o.job_id, o.envelope, o.payload, o.ready_at - %s
FROM %s o
WHERE o.error IS NULL AND NOT EXISTS (
	SELECT 1 FROM %s p WHERE p.queue = o.queue AND p.job_id = o.job_id AND p.seq < o.seq AND p.error IS NULL)
ORDER BY o.seq
LIMIT %s%s`, d.nowMS, name, name, d.param(1), d.lock)
	r.markFailed = fmt.Sprintf("UPDATE %s SET error = %s WHERE seq = %s", name, d.param(1), d.param(2))
	r.anyPending = fmt.Sprintf("SELECT 1 FROM %s WHERE error IS NULL LIMIT 1", name)
	return r, nil
}

// Notify wakes the relay if it sleeps because the outbox was empty. Call
// it after committing a transaction that enqueued, to relay at once
// instead of at the next poll. It never blocks.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// RelayStats counts what one relay did since it was made. A row counts
// once its deletion committed.
type RelayStats struct {
	Batches    int64 // batches that moved at least one row
	Enqueued   int64 // jobs stored in Redis
	Duplicates int64 // jobs whose id was pending in Redis already: a replay, or one id enqueued twice
	Cancelled  int64 // cancels that removed a job from Redis
	NotFound   int64 // cancels that found no job
	InProgress int64 // cancels that found the job running: its worker was asked to stop
	Failed     int64 // rows marked failed
	Expired    int64 // jobs whose expiry (job.ExpireAt) passed while they waited in the outbox: deleted, never enqueued
	Errors     int64 // failed batches and Redis probes, each followed by a backoff
}

type relayCounters struct {
	batches, enqueued, duplicates, cancelled, notFound, inProgress, failed, expired, errors atomic.Int64
}

// byOutcome maps each row outcome to its counter.
func (c *relayCounters) byOutcome() map[string]*atomic.Int64 {
	return map[string]*atomic.Int64{outcomeEnqueued: &c.enqueued, outcomeDuplicate: &c.duplicates,
		outcomeCancelled: &c.cancelled, outcomeNotFound: &c.notFound, outcomeInProgress: &c.inProgress,
		outcomeFailed: &c.failed, outcomeExpired: &c.expired}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	c := &r.stats
	return RelayStats{
		Batches: c.batches.Load(), Enqueued: c.enqueued.Load(), Duplicates: c.duplicates.Load(),
		Cancelled: c.cancelled.Load(), NotFound: c.notFound.Load(), InProgress: c.inProgress.Load(),
		Failed: c.failed.Load(), Expired: c.expired.Load(), Errors: c.errors.Load(),
	}
}

// Run relays until ctx is cancelled, then returns nil: a batch in flight
// is finished first when Redis accepted it (so that it is not relayed
// again), or rolled back. It moves a batch of rows, and another at once
// while batches come back full; with the outbox empty it sleeps
// PollInterval or until [Relay.Notify]. After a failed batch it backs off
// and, if Redis failed, checks that Redis answers before it locks rows
// again, so that rows stay free for the application's cancels while Redis
// is down. While Run runs it reports the outbox's gauges.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox: Relay.Run is already running")
	}
	defer r.running.Store(false)
	m, unregister := r.instruments()
	defer func() { _ = unregister() }()
	if r.status.store != nil {
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.runStatus(sctx) }()
		defer func() { stop(); <-done }()
	}
	if stop := r.register(ctx); stop != nil {
		defer stop()
	}

	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(r.opts.MinBackoff),
		backoff.WithMaxInterval(r.opts.MaxBackoff),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.3),
		backoff.WithMaxElapsedTime(0), // never gives up
	)
	probe := false
	for ctx.Err() == nil {
		if probe {
			if err := r.probe(ctx); err != nil {
				if ctx.Err() != nil {
					break
				}
				r.stats.errors.Add(1)
				r.log.Warn().Err(err).Str("table", r.o.t.full()).Msg("outbox relay: redis does not answer yet")
				r.sleep(ctx, bo.NextBackOff(), false)
				continue
			}
			probe = false
		}
		res, err := r.batch(ctx, m)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			r.stats.errors.Add(1)
			r.status.failed(err)
			probe = res.redisFailed
			r.log.Warn().Err(err).Str("table", r.o.t.full()).Int("relayed", res.done).Msg("outbox relay: batch failed, backing off")
			r.sleep(ctx, bo.NextBackOff(), false)
			continue
		}
		bo.Reset()
		r.status.failed(nil)
		if res.rows < r.opts.BatchSize {
			r.sleep(ctx, r.opts.PollInterval, true)
		}
	}
	return nil
}

// sleep waits d, or until ctx is done, or (when wakeable) until Notify.
func (r *Relay) sleep(ctx context.Context, d time.Duration, wakeable bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = r.wake
	}
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	}
}

// probeQueue and probeID: the relay checks that Redis answers by
// cancelling a job that does not exist, which changes nothing.
const probeQueue = naming.DefaultQueue

func (r *Relay) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, r.opts.BatchTimeout)
	defer cancel()
	_, err := r.b.Cancel(pctx, probeQueue, "outbox-probe-"+job.NewID())
	if err == nil || errorsIsAny(err, broker.ErrNotFound, broker.ErrInProgress) {
		return nil
	}
	return err
}

// row is one outbox row of a batch and what became of it.
type row struct {
	seq            int64
	op, queue, id  string
	meta           sql.NullString
	payload        []byte
	wait           sql.NullInt64 // ready_at − the database's now, ms
	env            *job.Envelope
	outcome        string // one of the Outcome constants; "" while it stays (a transient failure)
	failure, cause error  // why it was marked failed, or why it stays
}

type batchResult struct {
	rows        int  // rows selected
	done        int  // rows deleted or marked failed
	redisFailed bool // a broker call failed for a reason other than the row
}

// batch moves one batch: select and lock rows, apply them to Redis, delete
// those Redis accepted and mark failed those it refused, commit.
func (r *Relay) batch(ctx context.Context, m *relayMetrics) (batchResult, error) {
	var res batchResult
	if r.o.d.immediate {
		// Take SQLite's write lock, which the application's writers wait
		// for, only when there is something to relay.
		var one int
		switch err := r.o.db.QueryRowContext(ctx, r.anyPending).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return res, nil
		case err != nil:
			return res, fmt.Errorf("outbox: relay %s: %w", r.o.t.full(), err)
		}
	}
	// The transaction outlives ctx, so that rows Redis accepted are deleted
	// even when Run is stopped meanwhile.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*r.opts.BatchTimeout)
	defer cancel()
	tx, err := r.begin(txCtx)
	if err != nil {
		return res, fmt.Errorf("outbox: relay %s: begin: %w", r.o.t.full(), err)
	}
	defer tx.rollback()
	rows, err := r.read(ctx, tx)
	if err != nil {
		return res, fmt.Errorf("outbox: relay %s: %w", r.o.t.full(), err)
	}
	res.rows = len(rows)
	if len(rows) == 0 {
		return res, nil
	}

	bctx, bcancel := context.WithTimeout(ctx, r.opts.BatchTimeout)
	res.redisFailed = r.apply(bctx, rows)
	bcancel()

	var done []any
	var firstCause error
	for i := range rows {
		w := &rows[i]
		switch {
		case w.outcome == outcomeFailed:
			msg := w.failure.Error()
			if _, err := tx.ExecContext(txCtx, r.markFailed, msg, w.seq); err != nil {
				return res, fmt.Errorf("outbox: relay %s: mark row %d failed: %w", r.o.t.full(), w.seq, err)
			}
			r.log.Error().Str("table", r.o.t.full()).Int64("seq", w.seq).Str("queue", w.queue).Str("job_id", w.id).
				Str("error", msg).Msg("outbox relay: row cannot be relayed; marked failed")
		case w.outcome != "":
			done = append(done, w.seq)
		default:
			if firstCause == nil {
				firstCause = w.cause
			}
		}
	}
	if len(done) > 0 {
		del := fmt.Sprintf("DELETE FROM %s WHERE seq IN (%s)", r.o.t.full(), r.o.d.params(1, len(done)))
		if _, err := tx.ExecContext(txCtx, del, done...); err != nil {
			return res, fmt.Errorf("outbox: relay %s: delete relayed rows: %w", r.o.t.full(), err)
		}
	}
	if err := tx.commit(); err != nil {
		return res, fmt.Errorf("outbox: relay %s: commit: %w", r.o.t.full(), err)
	}
	r.count(rows, m)
	for i := range rows {
		if w := &rows[i]; w.outcome != "" {
			res.done++
		}
	}
	if firstCause != nil {
		return res, fmt.Errorf("outbox: relay %s: %d of %d rows wait for the next try: %w", r.o.t.full(), len(rows)-res.done, len(rows), firstCause)
	}
	return res, nil
}

// read selects (and on PostgreSQL locks) the next batch.
func (r *Relay) read(ctx context.Context, tx relayTx) ([]row, error) {
	q, err := tx.QueryContext(ctx, r.selectBatch, r.opts.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("select batch: %w", err)
	}
	defer q.Close()
	var rows []row
	for q.Next() {
		var w row
		if err := q.Scan(&w.seq, &w.op, &w.queue, &w.id, &w.meta, &w.payload, &w.wait); err != nil {
			return nil, fmt.Errorf("select batch: %w", err)
		}
		rows = append(rows, w)
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("select batch: %w", err)
	}
	return rows, nil
}

// apply hands the batch to Redis, setting each row's outcome. It reports
// whether a broker call failed for a reason other than the row itself.
func (r *Relay) apply(ctx context.Context, rows []row) (redisFailed bool) {
	var envs []*job.Envelope
	var idx []int
	for i := range rows {
		w := &rows[i]
		switch w.op {
		case "enqueue":
			if !w.meta.Valid {
				w.outcome, w.failure = outcomeFailed, errors.New("enqueue row without an envelope")
				continue
			}
			env, err := decodeEnvelope(w.meta.String, w.queue, w.id, w.payload)
			if err != nil {
				w.outcome, w.failure = outcomeFailed, fmt.Errorf("envelope does not decode: %w", err)
				continue
			}
			if w.wait.Valid && w.wait.Int64 > 0 {
				env.Delay = time.Duration(w.wait.Int64) * time.Millisecond
			}
			if win := r.opts.ReplayWindow; win > 0 && (!env.Unique || env.UniqueFor < win) {
				env.Unique, env.UniqueFor = true, win
			}
			if err := naming.Expiry(env.ExpireAt, env.At, env.Delay, env.Debounce, time.Now()); err != nil {
				// It would never run: the broker refuses an expiry that
				// is not after the ready time.
				w.outcome = outcomeExpired
				r.log.Info().Str("table", r.o.t.full()).Str("queue", w.queue).Str("job_id", w.id).
					Time("expired_at", env.ExpireAt).Msg("outbox relay: job expired while it waited in the outbox; not enqueued")
				continue
			}
			w.env = env
			envs, idx = append(envs, env), append(idx, i)
		case "cancel":
			c, err := r.b.Cancel(ctx, w.queue, w.id)
			switch {
			case err == nil && c.Running:
				w.outcome, w.cause = outcomeInProgress, fmt.Errorf("outbox: cancel job %q in queue %q: %w: a worker runs it; it was asked to stop", w.id, w.queue, broker.ErrInProgress)
			case err == nil:
				w.outcome = outcomeCancelled
			case errors.Is(err, broker.ErrNotFound):
				w.outcome, w.cause = outcomeNotFound, err
			case errors.Is(err, broker.ErrInProgress):
				w.outcome, w.cause = outcomeInProgress, err
			case errors.Is(err, job.ErrInvalid):
				w.outcome, w.failure = outcomeFailed, err
			default:
				w.cause, redisFailed = err, true
			}
		default:
			w.outcome, w.failure = outcomeFailed, fmt.Errorf("unknown op %q", w.op)
		}
	}
	if len(envs) == 0 {
		return redisFailed
	}
	err := r.b.Enqueue(ctx, envs...)
	var be *job.BatchError
	switch {
	case err == nil:
		for _, i := range idx {
			rows[i].outcome = outcomeEnqueued
		}
	case len(envs) > 1 && errors.As(err, &be) && len(be.Errs) == len(envs):
		for j, i := range idx {
			redisFailed = r.enqueued(&rows[i], be.Errs[j]) || redisFailed
		}
	case len(envs) == 1:
		redisFailed = r.enqueued(&rows[idx[0]], err) || redisFailed
	case errors.Is(err, job.ErrInvalid):
		// The broker refuses a batch with an invalid envelope whole: find
		// it by enqueueing one at a time.
		for _, i := range idx {
			redisFailed = r.enqueued(&rows[i], r.b.Enqueue(ctx, rows[i].env)) || redisFailed
		}
	default:
		for _, i := range idx {
			rows[i].cause = err
		}
		redisFailed = true
	}
	return redisFailed
}

// enqueued sets the outcome of one enqueue row from its error, reporting
// whether it was a failure of Redis rather than of the row.
func (r *Relay) enqueued(w *row, err error) (redisFailed bool) {
	switch {
	case err == nil:
		w.outcome = outcomeEnqueued
	case errors.Is(err, broker.ErrDuplicate):
		w.outcome = outcomeDuplicate
	case errors.Is(err, job.ErrInvalid):
		w.outcome, w.failure = outcomeFailed, err
	default:
		w.cause = err
		return true
	}
	return false
}

// count adds a committed batch to the counters and the relayed metric,
// and reports cancels to OnCancel.
func (r *Relay) count(rows []row, m *relayMetrics) {
	c := &r.stats
	byOutcome := map[string]int64{}
	counters := c.byOutcome()
	for i := range rows {
		w := &rows[i]
		if w.outcome == "" {
			continue
		}
		byOutcome[w.outcome]++
		if n := counters[w.outcome]; n != nil {
			n.Add(1)
		}
		if w.op == "cancel" && w.outcome != outcomeFailed && r.opts.OnCancel != nil {
			r.opts.OnCancel(w.queue, w.id, w.cause)
		}
	}
	if len(byOutcome) > 0 {
		c.batches.Add(1)
	}
	for outcome, n := range byOutcome {
		m.relayed.Add(context.Background(), n, metric.WithAttributeSet(attribute.NewSet(
			labelTable.String(r.o.t.full()), labelOutcome.String(outcome))))
	}
}

// relayMetrics are the relay's instruments.
type relayMetrics struct {
	relayed metric.Int64Counter
}

// instruments creates the relayed counter and registers the gauges, which
// read [Outbox.Lag] at each collection.
func (r *Relay) instruments() (*relayMetrics, func() error) {
	mp := r.opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(scopeName)
	handle := func(err error) {
		if err != nil {
			otel.Handle(err)
		}
	}
	relayed, err := meter.Int64Counter(metricRelayed, metric.WithUnit("{row}"),
		metric.WithDescription("Outbox rows relayed to Redis and deleted, by outcome."))
	handle(err)
	lag, err := meter.Float64ObservableGauge(metricLag, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest outbox row not yet relayed has waited."))
	handle(err)
	rows := func(name, description string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit("{row}"), metric.WithDescription(description))
		handle(err)
		return g
	}
	pending := rows(metricPending, "Outbox rows waiting for the relay.")
	failed := rows(metricFailed, "Outbox rows the relay could not relay, marked failed.")
	labels := metric.WithAttributeSet(attribute.NewSet(labelTable.String(r.o.t.full())))
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		l, err := r.o.Lag(ctx)
		if err != nil {
			return err
		}
		o.ObserveFloat64(lag, l.Oldest.Seconds(), labels)
		o.ObserveInt64(pending, l.Pending, labels)
		o.ObserveInt64(failed, l.Failed, labels)
		return nil
	}, lag, pending, failed)
	if err != nil {
		handle(err)
		return &relayMetrics{relayed: relayed}, func() error { return nil }
	}
	return &relayMetrics{relayed: relayed}, reg.Unregister
}

// relayTx is a relay's transaction: a *sql.Tx, or on SQLite a dedicated
// connection in BEGIN IMMEDIATE.
type relayTx interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	commit() error
	rollback() // after commit: nothing
}

func (r *Relay) begin(ctx context.Context) (relayTx, error) {
	if !r.o.d.immediate {
		tx, err := r.o.db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return &stdTx{Tx: tx}, nil
	}
	conn, err := r.o.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &immediateTx{Conn: conn, ctx: ctx}, nil
}

type stdTx struct{ *sql.Tx }

func (t *stdTx) commit() error { return t.Tx.Commit() }
func (t *stdTx) rollback()     { _ = t.Tx.Rollback() }

// immediateTx is a transaction opened with BEGIN IMMEDIATE on a connection
// of its own, which database/sql's BeginTx cannot do.
type immediateTx struct {
	*sql.Conn
	ctx  context.Context
	done bool
}

func (t *immediateTx) commit() error {
	if _, err := t.Conn.ExecContext(t.ctx, "COMMIT"); err != nil {
		return err // rollback ends it
	}
	t.done = true
	_ = t.Conn.Close()
	return nil
}

func (t *immediateTx) rollback() {
	if t.done {
		return
	}
	t.done = true
	if _, err := t.Conn.ExecContext(context.WithoutCancel(t.ctx), "ROLLBACK"); err != nil &&
		!strings.Contains(err.Error(), "no transaction is active") {
		// The connection may still be inside the transaction: discard it
		// rather than hand it back to the pool.
		_ = t.Conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = t.Conn.Close()
}
