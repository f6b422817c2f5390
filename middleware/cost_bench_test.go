//go:build unix

package middleware_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/attempt"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

// nopProcessor is a span processor that drops every span. Being registered
// it makes the SDK do all its per-span work (recording, the snapshot at
// End); dropping the span leaves no queue or exporter in the figures.
type nopProcessor struct{}

func (nopProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (nopProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (nopProcessor) Shutdown(context.Context) error                  { return nil }
func (nopProcessor) ForceFlush(context.Context) error                { return nil }

// BenchmarkAttemptCost compares, side by side on a handler that does
// nothing, what one handling attempt costs on the real OpenTelemetry SDKs
// (every span sampled, handed to a processor that drops it; measurements
// aggregated by a reader never collected) without Redis. Every variant runs
// the worker's part of an attempt (attempt.With, the chain, Attempt.Settle):
//
//   - none: no middleware;
//   - span: a middleware that does only tracer.Start and span.End, the
//     least any tracing can cost; the span is a child of the producer's
//     span (a remote parent, as Tracing's), whose context it is handed
//     ready-made: reading it from the headers is left to Tracing's share;
//   - span+attrs: that, plus the consumer span's attributes for a
//     successful attempt set in one call: what the SDK charges for storing
//     the attributes docs/observability.md promises;
//   - tracing: middleware.Tracing, on a message with trace headers written
//     by middleware.EnqueueTracing (so the span has a remote parent);
//   - measure: Metrics' three measurements on cached attribute sets and
//     options, the least its instruments can cost;
//   - metrics: middleware.Metrics.
//
// Besides ns/op it reports cpu-ns/op: the CPU time (user+system, so with
// the garbage collector's) this process spent per attempt, which other load
// on the machine disturbs less than wall time.
//
// delayq's share of the tracing cost is (tracing − span) / span; of the
// metrics cost (metrics − measure) / measure. docs/observability.md
// ("Cost") has the figures.
func BenchmarkAttemptCost(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(nopProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()

	env := &job.Envelope{ID: "i2i1eqo2tja6ii30", Queue: "default", Type: "card.charge"}
	enq := middleware.EnqueueTracing(middleware.WithTracerProvider(tp))(job.EnqueuerFunc(func(context.Context, ...*job.Envelope) error { return nil }))
	if err := enq.Enqueue(context.Background(), env); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	m := &job.Message{Envelope: *env, Attempt: 1, ClaimedAt: now}
	m.ReadyAt = now.Add(-8 * time.Millisecond)
	nop := job.HandlerFunc(func(context.Context, *job.Message) error { return nil })

	tracer := tp.Tracer(middleware.ScopeName)
	kind := trace.WithSpanKind(trace.SpanKindConsumer)
	parent := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(env.Headers)))
	if !parent.IsValid() {
		b.Fatalf("no trace context in the headers %v", env.Headers)
	}
	var buf [9]attribute.KeyValue // one goroutine runs the loop
	span := func(withAttrs bool) job.Middleware {
		return func(next job.Handler) job.Handler {
			return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
				ctx, span := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), "process default", kind)
				err := next.Handle(ctx, m)
				if withAttrs {
					// In a buffer of its own, as Tracing does: the SDK
					// copies attributes, and a slice made per call would
					// be an allocation of this benchmark, not the SDK's.
					buf = successAttrs(m)
					span.SetAttributes(buf[:]...)
				}
				span.End()
				return err
			})
		}
	}

	meter := mp.Meter(middleware.ScopeName)
	counter, _ := meter.Int64Counter("bench.handled")
	durations, _ := meter.Float64Histogram("bench.duration")
	lateness, _ := meter.Float64Histogram("bench.lateness")
	set := attribute.NewSet(middleware.LabelQueue.String("default"), middleware.LabelType.String("card.charge"))
	setOut := attribute.NewSet(middleware.LabelQueue.String("default"), middleware.LabelType.String("card.charge"), middleware.LabelOutcome.String("success"))
	// The options as the variadic slices the instruments take, made once:
	// a slice made per call is an allocation.
	record := []metric.RecordOption{metric.WithAttributeSet(set)}
	addOut := []metric.AddOption{metric.WithAttributeSet(setOut)}
	recordOut := []metric.RecordOption{metric.WithAttributeSet(setOut)}
	measure := func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			lateness.Record(ctx, m.Lateness().Seconds(), record...)
			start := time.Now()
			err := next.Handle(ctx, m)
			counter.Add(ctx, 1, addOut...)
			durations.Record(ctx, time.Since(start).Seconds(), recordOut...)
			return err
		})
	}

	for _, c := range []struct {
		name string
		mw   job.Middleware
	}{
		{"none", nil},
		{"span", span(false)},
		{"span+attrs", span(true)},
		{"tracing", middleware.Tracing(middleware.WithTracerProvider(tp))},
		{"measure", measure},
		{"metrics", middleware.Metrics(middleware.WithMeterProvider(mp))},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := job.Handler(nop)
			if c.mw != nil {
				h = c.mw(nop)
			}
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				ctx, a := attempt.With[job.Envelope, job.Result, job.Progress](context.Background(), nil)
				settle := a.Settle
				_ = h.Handle(ctx, m)
				settle(job.Result{Outcome: job.OutcomeSuccess})
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// successAttrs are the attributes Tracing gives the span of a successful
// attempt of m (docs/observability.md), for the benchmarks' yardsticks.
func successAttrs(m *job.Message) [9]attribute.KeyValue {
	return [9]attribute.KeyValue{
		attribute.String("messaging.system", middleware.System),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", m.Queue),
		attribute.String("messaging.message.id", m.ID),
		middleware.AttrJobType.String(m.Type),
		middleware.AttrAttempt.Int(m.Attempt),
		middleware.AttrLatenessMS.Int64(m.Lateness().Milliseconds()),
		middleware.AttrOutcome.String("success"),
	}
}
