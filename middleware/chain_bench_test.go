package middleware_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

// BenchmarkChain measures the CPU cost per attempt of the middleware alone,
// without Redis: a message with trace headers through the chain, settled
// as the worker would.
func BenchmarkChain(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
	env := &job.Envelope{ID: "abc", Queue: "default", Type: "bench"}
	enq := middleware.EnqueueTracing(middleware.WithTracerProvider(tp))(job.EnqueuerFunc(func(context.Context, ...*job.Envelope) error { return nil }))
	_ = enq.Enqueue(context.Background(), env)
	now := time.Now()
	m := &job.Message{Envelope: *env, Attempt: 1, ClaimedAt: now}
	m.ReadyAt = now.Add(-time.Millisecond)
	nop := job.HandlerFunc(func(context.Context, *job.Message) error { return nil })
	for _, c := range []struct {
		name string
		mws  []job.Middleware
	}{
		{"none", nil},
		{"tracing", []job.Middleware{middleware.Tracing(middleware.WithTracerProvider(tp))}},
		{"metrics", []job.Middleware{middleware.Metrics(middleware.WithMeterProvider(mp))}},
		{"tracing+metrics", []job.Middleware{middleware.Tracing(middleware.WithTracerProvider(tp)), middleware.Metrics(middleware.WithMeterProvider(mp))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := job.Chain(nop, c.mws...)
			b.ReportAllocs()
			for b.Loop() {
				ctx, settle := job.WithResults(context.Background())
				_ = h.Handle(ctx, m)
				settle(job.Result{Outcome: job.OutcomeSuccess})
			}
		})
	}
}
