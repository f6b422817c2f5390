package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/attempt"
	"github.com/delayq/delayq/internal/guard"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// meter is a meter provider with a manual reader.
type meter struct {
	t      testing.TB
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeter(t testing.TB) *meter {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meter{t: t, reader: reader, mp: mp}
}

func (m *meter) collect() map[string]metricdata.Aggregation {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatal(err)
	}
	out := make(map[string]metricdata.Aggregation)
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			out[mt.Name] = mt.Data
		}
	}
	return out
}

// shortLabels are the short names the tests give the label keys.
var shortLabels = map[string]attribute.Key{"queue": middleware.LabelQueue, "type": middleware.LabelType, "outcome": middleware.LabelOutcome, "reason": middleware.LabelReason}

// matches reports whether set has every key=value of want (a key by its
// short name, or in full).
func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		key, ok := shortLabels[k]
		if !ok {
			key = attribute.Key(k)
		}
		got, ok := set.Value(key)
		if !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// sum adds up the points of a counter whose labels match want.
func sum(data map[string]metricdata.Aggregation, name string, want map[string]string) int64 {
	s, _ := data[name].(metricdata.Sum[int64])
	var n int64
	for _, p := range s.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// observations counts a histogram's observations.
func observations(data map[string]metricdata.Aggregation, name string) uint64 {
	h, _ := data[name].(metricdata.Histogram[float64])
	var n uint64
	for _, p := range h.DataPoints {
		n += p.Count
	}
	return n
}

// gauge returns an int64 gauge's value for a queue, and whether it exists.
func gauge(data map[string]metricdata.Aggregation, name, queue string) (int64, bool) {
	g, _ := data[name].(metricdata.Gauge[int64])
	for _, p := range g.DataPoints {
		if matches(p.Attributes, map[string]string{"queue": queue}) {
			return p.Value, true
		}
	}
	return 0, false
}

func TestMetricsCountOutcomes(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	m := newMeter(t)
	// Payload N says what the handler does: 0–89 succeed, 90–99 fail their
	// first attempt, 100–104 fail permanently.
	typ := job.New[payload]("metered")
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		switch {
		case j.Args.N >= 100:
			return retry.Permanent(errors.New("cannot ever work"))
		case j.Args.N >= 90 && j.Attempt == 1:
			return errors.New("try again")
		}
		return nil
	})
	enq := job.ChainEnqueuer(tb.b, middleware.EnqueueMetrics(middleware.WithMeterProvider(m.mp)))
	args := make([]payload, 105)
	for i := range args {
		args[i].N = i
	}
	if _, err := typ.EnqueueItems(tb.ctx, enq, testkit.Items(args, fast)); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Concurrency = 8
	stop := run(t, cfg, middleware.Metrics(middleware.WithMeterProvider(m.mp)))
	handled := func(outcome string) int64 {
		return sum(m.collect(), middleware.MetricHandled, map[string]string{"outcome": outcome, "queue": "default", "type": "metered"})
	}
	redistest.WaitFor(t, 20*time.Second, "115 attempts settled", func() bool {
		return handled("success") >= 100 && handled("retry") >= 10 && handled("dead") >= 5
	})
	stop()

	data := m.collect()
	for outcome, want := range map[string]int64{"success": 100, "retry": 10, "dead": 5, "lease_lost": 0, "released": 0} {
		if got := sum(data, middleware.MetricHandled, map[string]string{"outcome": outcome}); got != want {
			t.Errorf("%s{outcome=%s} = %d, want %d", middleware.MetricHandled, outcome, got, want)
		}
	}
	if got := sum(data, middleware.MetricEnqueued, map[string]string{"queue": "default", "type": "metered"}); got != 105 {
		t.Errorf("%s = %d, want 105", middleware.MetricEnqueued, got)
	}
	for _, name := range []string{middleware.MetricDuration, middleware.MetricLateness} {
		if n := observations(data, name); n != 115 {
			t.Errorf("%s has %d observations, want 115 (one per attempt)", name, n)
		}
	}
	if h, ok := data[middleware.MetricDuration].(metricdata.Histogram[float64]); !ok || !slices.Equal(h.DataPoints[0].Bounds, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}) {
		t.Errorf("%s does not use the documented buckets 0.001 … 300", middleware.MetricDuration)
	}
}

func TestQueueDepthGaugesMatchRedis(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	m := newMeter(t)
	enqueue := func(queue string, n int, opts ...job.Option) {
		t.Helper()
		typ := job.New[payload]("depth", job.Queue(queue))
		if _, err := typ.EnqueueItems(tb.ctx, tb.b, testkit.Items(make([]payload, n), opts...)); err != nil {
			t.Fatal(err)
		}
	}
	// "later": 7 jobs due in an hour. "busy": 5 due, 2 of them claimed.
	// "graveyard": 3 dead records.
	enqueue("later", 7, job.In(time.Hour))
	enqueue("busy", 5)
	if res, err := testkit.Drive(tb.b).Claim(tb.ctx, "busy", 2, time.Minute); err != nil || len(res.Jobs) != 2 {
		t.Fatalf("claim: %v, %d jobs", err, len(res.Jobs))
	}
	typ := job.New[payload]("doomed", job.Queue("graveyard"))
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return retry.Permanent(errors.New("no")) })
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, testkit.Items(make([]payload, 3))); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Queues = []worker.Queue{{Name: "graveyard"}}
	stop := run(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "3 dead records", func() bool {
		n, _ := tb.rdb.HLen(tb.ctx, tb.key("graveyard", "dead")).Result()
		return n == 3
	})
	stop()

	unregister, err := middleware.ObserveQueues(tb.b, nil, middleware.WithMeterProvider(m.mp))
	if err != nil {
		t.Fatal(err)
	}
	data := m.collect()
	now, err := tb.rdb.Time(tb.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	nowMS := strconv.FormatInt(now.UnixMilli(), 10)
	for _, q := range []string{"later", "busy", "graveyard"} {
		scheduled, _ := tb.rdb.ZCard(tb.ctx, tb.key(q, "scheduled")).Result()
		due, _ := tb.rdb.ZCount(tb.ctx, tb.key(q, "scheduled"), "-inf", nowMS).Result()
		processing, _ := tb.rdb.ZCard(tb.ctx, tb.key(q, "processing")).Result()
		dead, _ := tb.rdb.ZCard(tb.ctx, tb.key(q, "dead:index")).Result()
		for name, want := range map[string]int64{
			middleware.MetricScheduled: scheduled, middleware.MetricDue: due,
			middleware.MetricProcessing: processing, middleware.MetricDead: dead,
		} {
			if got, ok := gauge(data, name, q); !ok || got != want {
				t.Errorf("%s{queue=%s} = %d (present %v), Redis has %d", name, q, got, ok, want)
			}
		}
	}
	// And the state itself, so that a wrong setup cannot pass.
	for _, c := range []struct {
		name, queue string
		want        int64
	}{
		{middleware.MetricScheduled, "later", 7}, {middleware.MetricDue, "later", 0},
		{middleware.MetricScheduled, "busy", 3}, {middleware.MetricDue, "busy", 3}, {middleware.MetricProcessing, "busy", 2},
		{middleware.MetricDead, "graveyard", 3}, {middleware.MetricScheduled, "graveyard", 0},
	} {
		if got, _ := gauge(data, c.name, c.queue); got != c.want {
			t.Errorf("%s{queue=%s} = %d, want %d", c.name, c.queue, got, c.want)
		}
	}
	if lag, ok := data[middleware.MetricLag].(metricdata.Gauge[float64]); !ok || len(lag.DataPoints) != 3 {
		t.Errorf("%s has no point per queue", middleware.MetricLag)
	}

	if err := unregister(); err != nil {
		t.Fatal(err)
	}
	if _, ok := gauge(m.collect(), middleware.MetricScheduled, "later"); ok {
		t.Error("gauges still observed after unregister")
	}

	// A fixed list observes only those queues.
	m2 := newMeter(t)
	if _, err := middleware.ObserveQueues(tb.b, []string{"busy"}, middleware.WithMeterProvider(m2.mp)); err != nil {
		t.Fatal(err)
	}
	data = m2.collect()
	if _, ok := gauge(data, middleware.MetricScheduled, "later"); ok {
		t.Error("queue outside the list observed")
	}
	if got, _ := gauge(data, middleware.MetricProcessing, "busy"); got != 2 {
		t.Errorf("busy processing = %d, want 2", got)
	}
}

func TestObserveQueuesRejectsBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if _, err := middleware.ObserveQueues(nil, nil); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("nil reader: %v, want ErrInvalid", err)
	}
	if _, err := middleware.ObserveQueues(tb.b, []string{"bad{queue}"}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("bad queue name: %v, want ErrInvalid", err)
	}
}

// TestDeadTrimmedCounters: the dead records a capped dead-letter store
// trims are observed as delayq.queue.dead_trimmed by reason, equal to the
// queue's stats; a queue that trims nothing reports zeros.
func TestDeadTrimmedCounters(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	capped := testkit.NewBroker(t, tb.rdb, broker.Options{Namespace: tb.ns, DeadCap: 2})
	typ := job.New[payload]("doomed", job.Queue("graveyard"))
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return retry.Permanent(errors.New("no")) })
	if _, err := typ.EnqueueItems(tb.ctx, capped, testkit.Items(make([]payload, 5))); err != nil {
		t.Fatal(err)
	}
	if _, err := job.New[payload]("fine", job.Queue("quiet")).Enqueue(tb.ctx, capped, payload{}, job.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Broker = capped
	cfg.Queues = []worker.Queue{{Name: "graveyard"}}
	stop := run(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "5 deaths, 3 trimmed", func() bool {
		st, err := testkit.OneStats(capped.Stats(tb.ctx, "graveyard"))
		return err == nil && st.Dead == 2 && st.DeadTrimmedCap == 3
	})
	stop()

	m := newMeter(t)
	unregister, err := middleware.ObserveQueues(capped, nil, middleware.WithMeterProvider(m.mp))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unregister() }()
	data := m.collect()
	trims, ok := data[middleware.MetricDeadTrimmed].(metricdata.Sum[int64])
	if !ok || !trims.IsMonotonic || trims.Temporality != metricdata.CumulativeTemporality {
		t.Fatalf("%s: %#v, want a cumulative monotonic sum", middleware.MetricDeadTrimmed, data[middleware.MetricDeadTrimmed])
	}
	got := map[[2]string]int64{}
	for _, p := range trims.DataPoints {
		q, _ := p.Attributes.Value(middleware.LabelQueue)
		r, _ := p.Attributes.Value(middleware.LabelReason)
		got[[2]string{q.AsString(), r.AsString()}] = p.Value
	}
	want := map[[2]string]int64{{"graveyard", "cap"}: 3, {"graveyard", "age"}: 0, {"quiet", "cap"}: 0, {"quiet", "age"}: 0}
	if !maps.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", middleware.MetricDeadTrimmed, got, want)
	}
	un, ok := data[middleware.MetricDeadUnarchived].(metricdata.Sum[int64])
	if !ok || len(un.DataPoints) != 2 {
		t.Fatalf("%s: %#v, want a point per queue", middleware.MetricDeadUnarchived, data[middleware.MetricDeadUnarchived])
	}
	for _, p := range un.DataPoints {
		if p.Value != 0 {
			t.Errorf("%s = %d, want 0 (no hook)", middleware.MetricDeadUnarchived, p.Value)
		}
	}
}

// TestHistogramBucketsFollowAView: the buckets Metrics gives its
// histograms are a hint, which an SDK View replaces (docs/observability.md).
func TestHistogramBucketsFollowAView(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	reader := sdkmetric.NewManualReader()
	view := sdkmetric.NewView(sdkmetric.Instrument{Name: middleware.MetricDuration},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: []float64{1, 10}}})
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(view))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m := &meter{t: t, reader: reader, mp: mp}
	typ := job.New[payload]("viewed")
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return nil })
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, tb.config(t), middleware.Metrics(middleware.WithMeterProvider(mp)))
	defer stop()
	redistest.WaitFor(t, 20*time.Second, "the job observed", func() bool {
		return observations(m.collect(), middleware.MetricDuration) == 1
	})
	data := m.collect()
	if h, ok := data[middleware.MetricDuration].(metricdata.Histogram[float64]); !ok || !slices.Equal(h.DataPoints[0].Bounds, []float64{1, 10}) {
		t.Errorf("%s bounds = %v, want the view's [1 10]", middleware.MetricDuration, data[middleware.MetricDuration])
	}
	if h, ok := data[middleware.MetricLateness].(metricdata.Histogram[float64]); !ok || len(h.DataPoints[0].Bounds) != 14 {
		t.Errorf("%s bounds = %v, want the 14 default ones", middleware.MetricLateness, data[middleware.MetricLateness])
	}
}

// TestHeldByRateGauge: the due jobs a type's rate limit holds are a gauge
// by queue and type, 0 for a limited type holding none, and no series for
// a type without a limit.
func TestHeldByRateGauge(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	m := newMeter(t)
	if err := tb.b.SetRateLimit(tb.ctx, "sms", "sms.send", job.RateLimit{Count: 1, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetRateLimit(tb.ctx, "sms", "sms.idle", job.RateLimit{Count: 1, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	send := job.New[payload]("sms.send", job.Queue("sms"))
	free := job.New[payload]("sms.free", job.Queue("sms"))
	if _, err := send.EnqueueItems(tb.ctx, tb.b, testkit.Items(make([]payload, 4))); err != nil {
		t.Fatal(err)
	}
	if _, err := free.EnqueueItems(tb.ctx, tb.b, testkit.Items(make([]payload, 2))); err != nil {
		t.Fatal(err)
	}
	// One claim takes the one token and both free jobs, and holds the
	// other three sends.
	if res, err := testkit.Drive(tb.b).Claim(tb.ctx, "sms", 10, time.Minute); err != nil || len(res.Jobs) != 3 {
		t.Fatalf("claim: %v, %d jobs, want 3", err, len(res.Jobs))
	}
	if _, err := middleware.ObserveQueues(tb.b, []string{"sms"}, middleware.WithMeterProvider(m.mp)); err != nil {
		t.Fatal(err)
	}
	g, _ := m.collect()[middleware.MetricHeldByRate].(metricdata.Gauge[int64])
	got := map[string]int64{}
	for _, p := range g.DataPoints {
		q, _ := p.Attributes.Value(middleware.LabelQueue)
		typ, _ := p.Attributes.Value(middleware.LabelType)
		got[q.AsString()+"/"+typ.AsString()] = p.Value
	}
	if want := map[string]int64{"sms/sms.send": 3, "sms/sms.idle": 0}; !maps.Equal(got, want) {
		t.Errorf("%s = %v, want %v", middleware.MetricHeldByRate, got, want)
	}
}

// TestHeldByCapAndKeyGauges: delayq.queue.held_by_cap has one series per
// capped type (0 when it holds none), and delayq.queue.held_by_key the
// queue's jobs held by per-key caps, over all keys, with no series per
// key.
func TestHeldByCapAndKeyGauges(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	m := newMeter(t)
	for typ, n := range map[string]int{"mail.send": 1, "mail.idle": 1} {
		if err := tb.b.SetConcurrency(tb.ctx, "mail", typ, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "mail", "", 1); err != nil {
		t.Fatal(err)
	}
	send := job.New[payload]("mail.send", job.Queue("mail"))
	digest := job.New[payload]("mail.digest", job.Queue("mail"))
	if _, err := send.EnqueueItems(tb.ctx, tb.b, testkit.Items(make([]payload, 3))); err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // two keys, two jobs each: one of each key is held
		if _, err := digest.Enqueue(tb.ctx, tb.b, payload{}, job.Key(fmt.Sprintf("user-%d", i%2))); err != nil {
			t.Fatal(err)
		}
	}
	// One claim takes one send (its cap) and one digest of each key, and
	// holds the other two sends and one digest of each key.
	if res, err := testkit.Drive(tb.b).Claim(tb.ctx, "mail", 10, time.Minute); err != nil || len(res.Jobs) != 3 {
		t.Fatalf("claim: %v, %d jobs, want 3", err, len(res.Jobs))
	}
	if _, err := middleware.ObserveQueues(tb.b, []string{"mail"}, middleware.WithMeterProvider(m.mp)); err != nil {
		t.Fatal(err)
	}
	got := m.collect()
	byCap := map[string]int64{}
	g, _ := got[middleware.MetricHeldByCap].(metricdata.Gauge[int64])
	for _, p := range g.DataPoints {
		q, _ := p.Attributes.Value(middleware.LabelQueue)
		typ, _ := p.Attributes.Value(middleware.LabelType)
		byCap[q.AsString()+"/"+typ.AsString()] = p.Value
	}
	if want := map[string]int64{"mail/mail.send": 2, "mail/mail.idle": 0}; !maps.Equal(byCap, want) {
		t.Errorf("%s = %v, want %v", middleware.MetricHeldByCap, byCap, want)
	}
	k, _ := got[middleware.MetricHeldByKey].(metricdata.Gauge[int64])
	if len(k.DataPoints) != 1 || k.DataPoints[0].Value != 2 || k.DataPoints[0].Attributes.Len() != 1 {
		t.Errorf("%s = %+v, want one series of 2, labelled with the queue only", middleware.MetricHeldByKey, k.DataPoints)
	}
}

// TestMetricLabelsAreSpanAttributes: every label of the job metrics is an
// attribute of the span of the same operation, with the same value (the
// sent counter's of the send span, the handled counter's and the
// histograms' of the process span), and the two names that
// OpenTelemetry's messaging conventions define are theirs.
func TestMetricLabelsAreSpanAttributes(t *testing.T) {
	t.Parallel()
	if middleware.MetricEnqueued != "messaging.client.sent.messages" || middleware.MetricDuration != "messaging.process.duration" {
		t.Fatalf("metric names %q, %q: want the messaging conventions'", middleware.MetricEnqueued, middleware.MetricDuration)
	}
	sr, tp := newTracing(t)
	m := newMeter(t)
	typ := job.New[payload]("labels.match", job.Queue("mail"))
	var env *job.Envelope
	enq := job.ChainEnqueuer(job.EnqueuerFunc(func(_ context.Context, envs ...*job.Envelope) error {
		env = envs[0]
		return nil
	}), middleware.EnqueueTracing(middleware.WithTracerProvider(tp)), middleware.EnqueueMetrics(middleware.WithMeterProvider(m.mp)))
	if _, err := typ.Enqueue(context.Background(), enq, payload{}); err != nil {
		t.Fatal(err)
	}
	h := guard.Chain(job.HandlerFunc(func(context.Context, *job.Message) error { return nil }),
		middleware.Tracing(middleware.WithTracerProvider(tp)), middleware.Metrics(middleware.WithMeterProvider(m.mp)))
	ctx, a := attempt.With[job.Envelope, job.Result, job.Progress](context.Background(), nil)
	if err := h.Handle(ctx, &job.Message{Envelope: *env, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	a.Settle(job.Result{Outcome: job.OutcomeSuccess})

	spanOf := func(kind trace.SpanKind) map[attribute.Key]attribute.Value {
		for _, s := range sr.Ended() {
			if s.SpanKind() == kind {
				return attrs(s)
			}
		}
		t.Fatalf("no %v span", kind)
		return nil
	}
	send, process := spanOf(trace.SpanKindProducer), spanOf(trace.SpanKindConsumer)
	check := func(name string, set attribute.Set, span map[attribute.Key]attribute.Value) {
		t.Helper()
		for _, k := range []attribute.Key{"messaging.system", "messaging.operation.name", middleware.LabelQueue, middleware.LabelType} {
			if !set.HasValue(k) {
				t.Errorf("%s: labels %v, no %s", name, set.ToSlice(), k)
			}
		}
		for _, kv := range set.ToSlice() {
			if v, ok := span[kv.Key]; !ok || v.Emit() != kv.Value.Emit() {
				t.Errorf("%s: label %s=%s, span attribute %s", name, kv.Key, kv.Value.Emit(), v.Emit())
			}
		}
	}
	data := m.collect()
	for name, span := range map[string]map[attribute.Key]attribute.Value{
		middleware.MetricEnqueued: send, middleware.MetricHandled: process,
		middleware.MetricDuration: process, middleware.MetricLateness: process,
	} {
		switch d := data[name].(type) {
		case metricdata.Sum[int64]:
			if len(d.DataPoints) != 1 {
				t.Fatalf("%s: %d series, want 1", name, len(d.DataPoints))
			}
			check(name, d.DataPoints[0].Attributes, span)
		case metricdata.Histogram[float64]:
			if len(d.DataPoints) != 1 {
				t.Fatalf("%s: %d series, want 1", name, len(d.DataPoints))
			}
			check(name, d.DataPoints[0].Attributes, span)
		default:
			t.Fatalf("%s: not recorded (%T)", name, d)
		}
	}
}
