package periodic

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

// TestTickDuplicatesAreNotErrors: two schedulers with producer middleware
// (Options.Enqueue) enqueue every tick together, so the broker refuses one
// of each pair as a duplicate. Each tick's job is counted once by
// messaging.client.sent.messages (the counter equals the jobs handled), every
// producer span has status Unset, and the refused ones say so with
// delayq.enqueue.refused.
func TestTickDuplicatesAreNotErrors(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg := Options{Enqueue: []job.EnqueueMiddleware{
		middleware.EnqueueTracing(middleware.WithTracerProvider(tp)),
		middleware.EnqueueMetrics(middleware.WithMeterProvider(mp)),
	}}

	sim := newSimulated(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	add := func(s *Scheduler) { mustAdd(t, s, "every-second", "@every 1s") }
	a, b := sim.scheduler(t, cfg, add), sim.scheduler(t, cfg, add)
	handled := map[string]int{}
	const seconds = 20
	for range seconds {
		sim.clk.Advance(time.Second)
		sim.stepTogether(t, a, b)
		sim.drain(t, handled)
	}
	if len(handled) != seconds {
		t.Errorf("%d ticks handled, want %d", len(handled), seconds)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var counted int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "messaging.client.sent.messages" {
				for _, p := range s.DataPoints {
					counted += p.Value
				}
			}
		}
	}
	if counted != int64(len(handled)) {
		t.Errorf("%s = %d, want the %d jobs stored", "messaging.client.sent.messages", counted, len(handled))
	}
	refused := 0
	for _, sp := range sr.Ended() {
		if sp.Status().Code != codes.Unset {
			t.Errorf("span %s: status %v %q, want Unset", sp.Name(), sp.Status().Code, sp.Status().Description)
		}
		for _, kv := range sp.Attributes() {
			if kv.Key == "delayq.enqueue.refused" {
				refused++
			}
		}
	}
	if refused == 0 || len(sr.Ended()) != len(handled)+refused {
		t.Errorf("%d producer spans, %d of them refused, for %d jobs stored: want every refusal a duplicate and at least one", len(sr.Ended()), refused, len(handled))
	}
}
