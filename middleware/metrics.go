package middleware

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// Metric names. Where OpenTelemetry's messaging conventions (semconv
// v1.40.0) name a metric, delayq uses that name (messaging.*); the others
// are delayq's own. Units follow the conventions: "s" for durations,
// "{message}" and "{job}" for counts. Labels are the attributes the spans
// carry: the queue is messaging.destination.name (labelQueue), the type
// delayq.job.type (labelType), the outcome delayq.job.outcome
// (labelOutcome); the job metrics carry messaging.system ("delayq") and
// messaging.operation.name ("send" or "process") too. See
// docs/observability.md for samples; its "Names" section lists every name
// (TestNamesInDocs checks it against these constants).
const (
	metricEnqueued   = "messaging.client.sent.messages" // counter {message}: envelopes stored by producers; labels queue, type
	metricHandled    = "delayq.jobs.handled"            // counter {job}: settled attempts; labels queue, type, outcome
	metricDuration   = "messaging.process.duration"     // histogram s: handler time per attempt; labels queue, type, outcome
	metricLateness   = "delayq.job.lateness"            // histogram s: claim time − ready time per attempt; labels queue, type
	metricScheduled  = "delayq.queue.scheduled"         // gauge {job}: jobs waiting, due or not; label queue
	metricDue        = "delayq.queue.due"               // gauge {job}: of those, due now; label queue
	metricProcessing = "delayq.queue.processing"        // gauge {job}: jobs leased to workers; label queue
	metricDead       = "delayq.queue.dead"              // gauge {job}: dead records; label queue
	metricLag        = "delayq.queue.lag"               // gauge s: how long the oldest due job has waited; label queue
	metricHeld       = "delayq.queue.held"              // gauge {job}: due jobs of capped types held aside for a slot; label queue
	metricParked     = "delayq.queue.parked"            // gauge {job}: due jobs of paused types set aside; label queue
	// metricHeldByRate is a gauge {job}: due jobs of a rate-limited type
	// held for its next tokens (QueueStats.HeldByRate); labels queue,
	// type, one series per type with a rate limit (0 when none is held).
	metricHeldByRate = "delayq.queue.held_by_rate"
	// metricHeldByCap is a gauge {job}: the part of metricHeld that each
	// type's concurrency cap holds (QueueStats.HeldByCap); labels queue,
	// type, one series per type with a cap of its own (0 when none is
	// held).
	metricHeldByCap = "delayq.queue.held_by_cap"
	// metricHeldByKey is a gauge {job}: the part of metricHeld that per-key
	// controls hold, over all keys (QueueStats.HeldByKey); label queue.
	// There is no series per key: keys are unbounded (a customer, a
	// recipient), and a label per key would be too; the keys holding the
	// most are listed by the broker, the CLI and the dashboard instead.
	metricHeldByKey = "delayq.queue.held_by_key"
	metricPaused    = "delayq.queue.paused"    // gauge: 1 when the whole queue is paused, else 0; label queue
	metricProcesses = "delayq.queue.processes" // gauge {process}: live processes serving the queue (WithServingProcesses); label queue
	// metricDeadTrimmed counts the dead records a queue's dead-letter store
	// dropped, since the queue began (job.QueueStats.DeadTrimmedCap,
	// DeadTrimmedAge): counter {job}; labels queue, reason ("cap": the
	// store was full, broker.Options.DeadCap; "age": older than
	// DeadMaxAge). In Prometheus: delayq_queue_dead_trimmed_total.
	metricDeadTrimmed = "delayq.queue.dead_trimmed"
	// metricDeadUnarchived counts, of those, the records a worker's
	// OnDeadTrimmed hook could not be handed for want of room
	// (job.QueueStats.DeadTrimmedUnarchived): counter {job}; label queue.
	metricDeadUnarchived = "delayq.queue.dead_trimmed_unarchived"
)

// Metric label keys: the span attribute keys of the same values (in
// Prometheus, with dots as underscores: messaging_destination_name,
// delayq_job_type, delayq_job_outcome, delayq_trim_reason).
const (
	labelQueue   = attribute.Key("messaging.destination.name")
	labelType    = attrJobType
	labelOutcome = attrOutcome
	labelReason  = attribute.Key("delayq.trim.reason") // of metricDeadTrimmed: "cap" or "age"
)

// Attributes of every job metric (the counters and histograms of Metrics
// and EnqueueMetrics), as their spans carry them.
var (
	attrSystem  = attribute.Key("messaging.system").String(systemName)
	attrSend    = attribute.Key("messaging.operation.name").String("send")
	attrProcess = attribute.Key("messaging.operation.name").String("process")
)

// Bucket boundaries, in seconds, of the duration and lateness histograms:
// a hint to the meter provider, which an SDK View replaces (see
// docs/observability.md).
var (
	durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	latenessBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}
)

// MetricsOption configures [Metrics], [EnqueueMetrics] and [ObserveQueues].
type MetricsOption func(*metricsConfig)

type metricsConfig struct {
	mp      metric.MeterProvider
	serving func(ctx context.Context) (map[string]int64, error)
}

// WithServingProcesses makes ObserveQueues report delayq.queue.processes: at each
// collection, count returns how many live processes serve each queue (a
// queue it leaves out has none), as fleet.ServingCounts reads them from
// the process registry:
//
//	middleware.ObserveQueues(b, nil, middleware.WithServingProcesses(fleet.ServingCounts(b.Client(), b.Namespace())))
//
// Every observed queue gets a value, 0 when no live process serves it, so
// an alert can compare it with the queue's due and processing jobs. Other
// middleware ignore it.
func WithServingProcesses(count func(ctx context.Context) (map[string]int64, error)) MetricsOption {
	return func(c *metricsConfig) { c.serving = count }
}

// WithMeterProvider sets the meter provider. Default: the global one
// (otel.GetMeterProvider), looked up when the middleware is built; it
// follows a later otel.SetMeterProvider.
func WithMeterProvider(mp metric.MeterProvider) MetricsOption {
	return func(c *metricsConfig) {
		if mp != nil {
			c.mp = mp
		}
	}
}

func newMeter(opts []MetricsOption) metric.Meter {
	return newMetricsConfig(opts).mp.Meter(scopeName)
}

func newMetricsConfig(opts []MetricsOption) metricsConfig {
	c := metricsConfig{}
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	return c
}

// handle reports an instrument that could not be created; the API returns a
// usable no-op instrument with the error.
func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// labelSets caches, by queue and job type, the measurement options of
// their attribute sets: building a set sorts and allocates, and so does
// boxing a key for a sync.Map. Reads are a plain map lookup on a map that is
// copied on write, since new pairs are rare after the first minutes.
type labelSets struct {
	op attribute.KeyValue                     // messaging.operation.name
	mu sync.Mutex                             // serialises writers
	m  atomic.Pointer[map[labelKey]*labelSet] // never written after it is stored
}

type labelKey struct{ queue, typ string }

// knownOutcomes bounds the outcomes whose options a labelSet holds ready.
const knownOutcomes = int(job.OutcomeReleased) + 1

// labelSet holds the options of one queue and type: without an outcome
// (lateness, enqueued) and with each outcome (handled, duration), as the
// variadic slices the instruments take, so that no call allocates one.
type labelSet struct {
	op         attribute.KeyValue
	queue, typ string
	add        []metric.AddOption
	record     []metric.RecordOption
	addOut     [knownOutcomes][]metric.AddOption
	recordOut  [knownOutcomes][]metric.RecordOption
}

func (l *labelSets) get(queue, typ string) *labelSet {
	if m := l.m.Load(); m != nil {
		if s, ok := (*m)[labelKey{queue, typ}]; ok {
			return s
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var old map[labelKey]*labelSet
	if m := l.m.Load(); m != nil {
		old = *m
		if s, ok := old[labelKey{queue, typ}]; ok {
			return s
		}
	}
	s := &labelSet{op: l.op, queue: queue, typ: typ}
	opt := metric.WithAttributeSet(attribute.NewSet(attrSystem, l.op, labelQueue.String(queue), labelType.String(typ)))
	s.add, s.record = []metric.AddOption{opt}, []metric.RecordOption{opt}
	for o := range knownOutcomes {
		s.addOut[o], s.recordOut[o] = s.withOutcome(job.Outcome(o))
	}
	m := make(map[labelKey]*labelSet, len(old)+1)
	maps.Copy(m, old)
	m[labelKey{queue, typ}] = s
	l.m.Store(&m)
	return s
}

// withOutcome builds the options of s's labels plus outcome.
func (s *labelSet) withOutcome(outcome job.Outcome) ([]metric.AddOption, []metric.RecordOption) {
	opt := metric.WithAttributeSet(attribute.NewSet(attrSystem, s.op, labelQueue.String(s.queue), labelType.String(s.typ), labelOutcome.String(outcome.String())))
	return []metric.AddOption{opt}, []metric.RecordOption{opt}
}

// outcome returns the options of s's labels plus outcome.
func (s *labelSet) outcome(outcome job.Outcome) ([]metric.AddOption, []metric.RecordOption) {
	if int(outcome) < knownOutcomes {
		return s.addOut[outcome], s.recordOut[outcome]
	}
	return s.withOutcome(outcome)
}

// Metrics is handler middleware that counts settled attempts by outcome
// (delayq.jobs.handled) and records handler durations (messaging.process.duration)
// and lateness (delayq.job.lateness, the claim time minus the ready time,
// both by the Redis server's clock). Outcomes come from the worker
// (job.OnResult): success, retry, dead, lease_lost, released.
func Metrics(opts ...MetricsOption) job.Middleware {
	meter := newMeter(opts)
	handled, err := meter.Int64Counter(metricHandled, metric.WithUnit("{job}"),
		metric.WithDescription("Handling attempts settled by a worker, by outcome."))
	handle(err)
	duration, err := meter.Float64Histogram(metricDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from a handler's start to its return, per attempt."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	handle(err)
	lateness, err := meter.Float64Histogram(metricLateness, metric.WithUnit("s"),
		metric.WithDescription("Time from a job's ready time to its claim by a worker, per attempt."),
		metric.WithExplicitBucketBoundaries(latenessBuckets...))
	handle(err)
	mi := &metricsInstruments{handled: handled, duration: duration, sets: labelSets{op: attrProcess}}
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			if !handled.Enabled(ctx) && !duration.Enabled(ctx) && !lateness.Enabled(ctx) {
				return next.Handle(ctx, m) // no SDK, or all three dropped
			}
			q := m.Queue
			if q == "" {
				q = naming.DefaultQueue
			}
			labels := mi.sets.get(q, m.Type)
			lateness.Record(ctx, max(m.Lateness(), 0).Seconds(), labels.record...)
			a := metricsAttempts.Get().(*metricsAttempt)
			a.mi, a.ctx, a.labels, a.start = mi, ctx, labels, time.Now()
			return observeAttempt(ctx, m, next, a)
		})
	}
}

// metricsInstruments are the instruments Metrics records on when an
// attempt settles, and its label cache.
type metricsInstruments struct {
	handled  metric.Int64Counter
	duration metric.Float64Histogram
	sets     labelSets
}

// metricsAttempt is what Metrics keeps of one attempt until the worker
// settles it; pooled, like consumerAttempt.
type metricsAttempt struct {
	mi         *metricsInstruments
	ctx        context.Context
	labels     *labelSet
	start, end time.Time
	cb         func(job.Result) // a.settled, bound once
}

var metricsAttempts sync.Pool

func init() {
	// Set here: New refers to done, which puts into the pool.
	metricsAttempts.New = func() any {
		a := &metricsAttempt{}
		a.cb = a.settled
		return a
	}
}

func (a *metricsAttempt) callback() func(job.Result) { return a.cb }
func (a *metricsAttempt) returned()                  { a.end = time.Now() }
func (a *metricsAttempt) settled(res job.Result)     { a.done(res, a.end) }

func (a *metricsAttempt) done(res job.Result, end time.Time) {
	// a.ctx may be cancelled by now; synchronous instruments record all
	// the same (ctx only selects exemplars).
	add, record := a.labels.outcome(res.Outcome)
	a.mi.handled.Add(a.ctx, 1, add...)
	a.mi.duration.Record(a.ctx, end.Sub(a.start).Seconds(), record...)
	*a = metricsAttempt{cb: a.cb}
	metricsAttempts.Put(a)
}

// EnqueueMetrics is producer middleware that counts the envelopes stored
// (messaging.client.sent.messages, by queue and type). Envelopes the
// broker refused are not counted: a send that failed is on its span (with
// error.type), and the counter's sum is the jobs stored.
func EnqueueMetrics(opts ...MetricsOption) job.EnqueueMiddleware {
	meter := newMeter(opts)
	enqueued, err := meter.Int64Counter(metricEnqueued, metric.WithUnit("{message}"),
		metric.WithDescription("Jobs stored by producers."))
	handle(err)
	sets := &labelSets{op: attrSend}
	return func(next job.Enqueuer) job.Enqueuer {
		return job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
			err := next.Enqueue(ctx, envs...)
			errOf := errorsOf(err, len(envs))
			for i, env := range envs {
				if env != nil && errOf(i) == nil {
					enqueued.Add(ctx, 1, sets.get(queueOf(env), env.Type).add...)
				}
			}
			return err
		})
	}
}

// QueueStatsReader reads the state of queues; *broker.Broker implements it.
// Stats returns the stats of the queues named, or of every queue with none
// named; a queue that cannot be read is left out of the slice and named in
// the error, which comes with the others' stats.
type QueueStatsReader interface {
	Stats(ctx context.Context, queues ...string) ([]job.QueueStats, error)
}

// ObserveQueues registers observable gauges of queue depths, read from r with
// one Stats call (every queue named, pipelined) at each collection: delayq.queue.scheduled, .due,
// .processing, .dead, .held, .held_by_key, .parked (in jobs), .paused (0
// or 1) and .lag (seconds the oldest due job has waited), each labelled
// with the queue, .held_by_rate and .held_by_cap labelled with the type
// too (one series per type with a rate limit or a cap of its own),
// and the counters delayq.queue.dead_trimmed (labelled with the reason too)
// and .dead_trimmed_unarchived, which Redis keeps for the whole fleet;
// with WithServingProcesses, also .processes (live processes serving it). With no queues given it observes
// every queue r knows (r.Stats with none named) at each collection. A queue that cannot be
// read is skipped for that collection and the error reported to the meter
// provider's error handler. Call unregister to stop observing.
func ObserveQueues(r QueueStatsReader, queues []string, opts ...MetricsOption) (unregister func() error, err error) {
	if r == nil {
		return nil, fmt.Errorf("middleware: ObserveQueues: %w: nil QueueStatsReader", job.ErrInvalid)
	}
	for _, q := range queues {
		if err := naming.Queue(q); err != nil {
			return nil, fmt.Errorf("middleware: ObserveQueues: %w", err)
		}
	}
	queues = append([]string(nil), queues...)
	cfg := newMetricsConfig(opts)
	meter := cfg.mp.Meter(scopeName)
	gaugeOf := func(name, unit, desc string) metric.Int64ObservableGauge {
		o := []metric.Int64ObservableGaugeOption{metric.WithDescription(desc)}
		if unit != "" {
			o = append(o, metric.WithUnit(unit))
		}
		g, err := meter.Int64ObservableGauge(name, o...)
		handle(err)
		return g
	}
	gauge := func(name, desc string) metric.Int64ObservableGauge { return gaugeOf(name, "{job}", desc) }
	scheduled := gauge(metricScheduled, "Jobs waiting in a queue, due or not.")
	due := gauge(metricDue, "Jobs of a queue whose ready time has come.")
	processing := gauge(metricProcessing, "Jobs of a queue leased to workers.")
	dead := gauge(metricDead, "Dead records of a queue.")
	held := gauge(metricHeld, "Due jobs of a queue's capped types held aside until a slot frees.")
	parked := gauge(metricParked, "Due jobs of a queue's paused types set aside until the type resumes.")
	heldByRate := gauge(metricHeldByRate, "Due jobs of a rate-limited type held until its next tokens.")
	heldByCap := gauge(metricHeldByCap, "Due jobs of a capped type held aside until a job of the type ends.")
	heldByKey := gauge(metricHeldByKey, "Due jobs held aside by per-key controls, over all keys.")
	// No unit: a "1" would become a _ratio suffix in Prometheus.
	paused := gaugeOf(metricPaused, "", "1 when the whole queue is paused, else 0.")
	lag, err := meter.Float64ObservableGauge(metricLag, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due job of a queue has waited."))
	handle(err)
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit("{job}"), metric.WithDescription(desc))
		handle(err)
		return c
	}
	trimmed := counter(metricDeadTrimmed, "Dead records a queue's dead-letter store dropped, by its cap or by age.")
	unarchived := counter(metricDeadUnarchived, "Dead records trimmed that the workers' OnDeadTrimmed hook could not be handed for want of room.")
	instruments := []metric.Observable{scheduled, due, processing, dead, held, parked, heldByRate, heldByCap, heldByKey, paused, lag, trimmed, unarchived}
	var procs metric.Int64ObservableGauge
	if cfg.serving != nil {
		procs = gaugeOf(metricProcesses, "{process}", "Live processes serving a queue, from the process registry.")
		instruments = append(instruments, procs)
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		var errs []error
		var serving map[string]int64
		if cfg.serving != nil {
			var err error
			if serving, err = cfg.serving(ctx); err != nil {
				errs = append(errs, fmt.Errorf("delayq queue metrics: live processes: %w", err))
			}
		}
		all, err := r.Stats(ctx, queues...)
		if err != nil { // the queues that could be read come with it
			errs = append(errs, fmt.Errorf("delayq queue metrics: %w", err))
		}
		for _, s := range all {
			q := s.Queue
			labels := metric.WithAttributeSet(attribute.NewSet(labelQueue.String(q)))
			o.ObserveInt64(scheduled, s.Scheduled, labels)
			o.ObserveInt64(due, s.Due, labels)
			o.ObserveInt64(processing, s.Processing, labels)
			o.ObserveInt64(dead, s.Dead, labels)
			o.ObserveInt64(held, s.Held, labels)
			o.ObserveInt64(parked, s.Parked, labels)
			for t := range s.RateLimits {
				if t != "" {
					o.ObserveInt64(heldByRate, s.HeldByRate[t], metric.WithAttributeSet(attribute.NewSet(labelQueue.String(q), labelType.String(t))))
				}
			}
			for t := range s.Caps {
				if t != "" {
					o.ObserveInt64(heldByCap, s.HeldByCap[t], metric.WithAttributeSet(attribute.NewSet(labelQueue.String(q), labelType.String(t))))
				}
			}
			o.ObserveInt64(heldByKey, s.HeldByKey, labels)
			p := int64(0)
			if s.Paused {
				p = 1
			}
			o.ObserveInt64(paused, p, labels)
			o.ObserveFloat64(lag, staleness(s).Seconds(), labels)
			o.ObserveInt64(trimmed, s.DeadTrimmedCap, metric.WithAttributeSet(attribute.NewSet(labelQueue.String(q), labelReason.String(naming.TrimCap))))
			o.ObserveInt64(trimmed, s.DeadTrimmedAge, metric.WithAttributeSet(attribute.NewSet(labelQueue.String(q), labelReason.String(naming.TrimAge))))
			o.ObserveInt64(unarchived, s.DeadTrimmedUnarchived, labels)
			if serving != nil {
				o.ObserveInt64(procs, serving[q], labels)
			}
		}
		return errors.Join(errs...)
	}, instruments...)
	if err != nil {
		return nil, fmt.Errorf("middleware: ObserveQueues: %w", err)
	}
	return reg.Unregister, nil
}

// staleness is how long the oldest due job of s has waited, or 0.
func staleness(s job.QueueStats) time.Duration {
	if s.OldestDue.IsZero() {
		return 0
	}
	return max(s.Now.Sub(s.OldestDue), 0)
}
