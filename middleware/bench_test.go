//go:build unix

package middleware_test

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/worker"
)

// BenchmarkDrain measures draining a burst of due jobs, whose handler does
// nothing, through one worker:
//
//   - bare: the worker's default chain only;
//   - noop: Tracing and Metrics (and their producer middleware) on no-op
//     providers, which is what an application that installed no
//     OpenTelemetry SDK gets from the global providers;
//   - sdk-metrics, sdk-tracing, sdk: Metrics, Tracing or both on the real
//     OpenTelemetry SDKs: every span sampled and handed through a batch span
//     processor to an exporter that drops it, every measurement aggregated
//     by a reader that is never collected;
//   - sdk-sampled: both, with spans sampled at 10 % by the producer
//     (ParentBased(TraceIDRatioBased(0.1))), as production often runs;
//   - sdk-span: the least any tracing of an attempt costs, the yardstick of
//     sdk-tracing: the same SDK and producer, but the worker's middleware
//     only starts and ends a span per attempt (no attributes, no parent
//     read from the job's headers);
//   - sdk-span-attrs: sdk-span plus the nine attributes of a successful
//     attempt's span, set in one call: what the SDK charges for them.
//
// Only the drain is timed: from the worker's start until every job is
// acknowledged; the producer's spans are flushed and its garbage collected
// before (debug.FreeOSMemory). Besides ns/op it reports jobs/s and cpu-µs/job: the CPU time
// (user+system) this process spent per job while timed, which other load on
// the machine disturbs less than wall time. docs/observability.md ("Cost")
// has the figures.
func BenchmarkDrain(b *testing.B) {
	for _, c := range []drainCase{
		{name: "bare"},
		{name: "noop", tracing: "noop", metrics: "noop"},
		{name: "sdk-metrics", metrics: "sdk"},
		{name: "sdk-tracing", tracing: "sdk"},
		{name: "sdk", tracing: "sdk", metrics: "sdk"},
		{name: "sdk-sampled", tracing: "sdk", metrics: "sdk", ratio: 0.1},
		{name: "sdk-span", tracing: "span"},
		{name: "sdk-span-attrs", tracing: "span+attrs"},
	} {
		b.Run(c.name, func(b *testing.B) { benchDrain(b, c) })
	}
}

// drainCase says which providers the middleware gets: "" for no middleware,
// "noop" or "sdk" ("span" or "span+attrs" for tracing: bareSpan on the
// SDK); ratio > 0 samples spans at that ratio.
type drainCase struct {
	name             string
	tracing, metrics string
	ratio            float64
}

const drainJobs = 2000

func benchDrain(b *testing.B, c drainCase) {
	tb := setup(b)
	typ := job.New[payload]("bench")
	var handled atomic.Int64
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		handled.Add(1)
		return nil
	})
	var enqMWs []job.EnqueueMiddleware
	var mws []job.Middleware
	flush := func() {}
	switch c.tracing {
	case "noop":
		tp := tracenoop.NewTracerProvider()
		enqMWs = append(enqMWs, middleware.EnqueueTracing(middleware.WithTracerProvider(tp)))
		mws = append(mws, middleware.Tracing(middleware.WithTracerProvider(tp)))
	case "sdk", "span", "span+attrs":
		sampler := sdktrace.AlwaysSample()
		if c.ratio > 0 {
			sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.ratio))
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		flush = func() { _ = tp.ForceFlush(context.Background()) }
		enqMWs = append(enqMWs, middleware.EnqueueTracing(middleware.WithTracerProvider(tp)))
		if c.tracing != "sdk" {
			mws = append(mws, bareSpan(tp.Tracer("bench"), c.tracing == "span+attrs"))
		} else {
			mws = append(mws, middleware.Tracing(middleware.WithTracerProvider(tp)))
		}
	}
	switch c.metrics {
	case "noop":
		mp := metricnoop.NewMeterProvider()
		enqMWs = append(enqMWs, middleware.EnqueueMetrics(middleware.WithMeterProvider(mp)))
		mws = append(mws, middleware.Metrics(middleware.WithMeterProvider(mp)))
	case "sdk":
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		enqMWs = append(enqMWs, middleware.EnqueueMetrics(middleware.WithMeterProvider(mp)))
		mws = append(mws, middleware.Metrics(middleware.WithMeterProvider(mp)))
	}
	enq := job.ChainEnqueuer(tb.b, enqMWs...)
	args := make([]payload, drainJobs)
	cfg := tb.config(b)
	cfg.Concurrency = 32
	jobsKey := tb.key(naming.DefaultQueue, "jobs")
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for start := 0; start < drainJobs; start += 500 {
			if _, err := typ.EnqueueItems(tb.ctx, enq, testkit.Items(args[start:start+500])); err != nil {
				b.Fatal(err)
			}
		}
		cfg.Middleware = mws
		w, err := worker.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		want := handled.Load() + drainJobs
		// The producer's spans and garbage belong to the untimed enqueue
		// (in production, to another process): flush them, collect, and
		// hand the freed memory back now rather than in the timed drain.
		flush()
		debug.FreeOSMemory()
		b.StartTimer()
		cpu0 := cpuTime(b)
		go func() { defer close(done); _ = w.Run(ctx) }()
		deadline := time.Now().Add(time.Minute)
		for {
			if handled.Load() >= want {
				if n, err := tb.rdb.HLen(tb.ctx, jobsKey).Result(); err == nil && n == 0 {
					break
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("drain of %d jobs did not finish within a minute", drainJobs)
			}
			time.Sleep(time.Millisecond)
		}
		cpu += cpuTime(b) - cpu0
		b.StopTimer()
		cancel()
		<-done
	}
	b.ReportMetric(float64(drainJobs*b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(drainJobs*b.N), "cpu-µs/job")
}

// cpuTime is the user plus system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bareSpan starts and ends a span around each attempt, and does nothing
// else: the least tracing an attempt can cost; withAttrs adds the
// attributes of a successful attempt, in one call.
func bareSpan(tracer trace.Tracer, withAttrs bool) job.Middleware {
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			ctx, span := tracer.Start(ctx, "process")
			err := next.Handle(ctx, m)
			if withAttrs {
				attrs := successAttrs(m)
				span.SetAttributes(attrs[:]...)
			}
			span.End()
			return err
		})
	}
}
