package middleware

import (
	"context"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing reads the common headers itself when its propagator is the
// default one; whatever the headers, it must get what the propagator gets.

func checkExtractSame(t *testing.T, headers map[string]string) {
	t.Helper()
	ct := &consumerTracer{prop: defaultPropagator, w3c: true}
	fast := ct.extract(context.Background(), headers)
	slow := defaultPropagator.Extract(context.Background(), propagation.MapCarrier(headers))
	fsc, ssc := trace.SpanContextFromContext(fast), trace.SpanContextFromContext(slow)
	if !fsc.Equal(ssc) || fsc.IsRemote() != ssc.IsRemote() || fsc.TraceState().String() != ssc.TraceState().String() {
		t.Fatalf("headers %q: span context %+v, the propagator's %+v", headers, fsc, ssc)
	}
	if fb, sb := members(baggage.FromContext(fast)), members(baggage.FromContext(slow)); !maps.Equal(fb, sb) {
		t.Fatalf("headers %q: baggage %q, the propagator's %q", headers, fb, sb)
	}
}

// members is b's members as key → value and properties (the order of
// b.String is not defined).
func members(b baggage.Baggage) map[string]string {
	out := map[string]string{}
	for _, m := range b.Members() {
		out[m.Key()] = m.String()
	}
	return out
}

const validTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

var traceparentSeeds = []string{
	validTraceparent,
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff",
	"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
	"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
	"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
	"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // a later version
	"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
	"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
	"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
	"",
	"garbage",
}

func TestTracingExtractMatchesThePropagator(t *testing.T) {
	t.Parallel()
	for _, tp := range traceparentSeeds {
		for _, extra := range []map[string]string{
			nil,
			{"tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
			{"tracestate": ""},
			{"baggage": "tenant=acme,user=42"},
			{"baggage": ""},
			{"tenant": "acme"},
		} {
			h := map[string]string{"traceparent": tp}
			for k, v := range extra {
				h[k] = v
			}
			checkExtractSame(t, h)
		}
	}
	checkExtractSame(t, nil)
	checkExtractSame(t, map[string]string{"baggage": "tenant=acme"})
}

func FuzzTracingExtract(f *testing.F) {
	for _, tp := range traceparentSeeds {
		f.Add(tp, "", "")
	}
	f.Add(validTraceparent, "rojo=00f067aa0ba902b7", "tenant=acme")
	f.Fuzz(func(t *testing.T, traceparent, tracestate, bag string) {
		h := map[string]string{"traceparent": traceparent}
		if tracestate != "" {
			h["tracestate"] = tracestate
		}
		if bag != "" {
			h["baggage"] = bag
		}
		checkExtractSame(t, h)
	})
}

func TestTracingRecognisesTheDefaultPropagator(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts []TracingOption
		want bool
	}{
		{nil, true},
		{[]TracingOption{WithPropagator(defaultPropagator)}, true},
		{[]TracingOption{WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))}, false},
		{[]TracingOption{WithPropagator(propagation.TraceContext{})}, false},
	} {
		cfg := newTracingConfig(c.opts)
		if got := cfg.prop == propagation.TextMapPropagator(defaultPropagator); got != c.want {
			t.Errorf("options %v: default propagator recognised %v, want %v", c.opts, got, c.want)
		}
	}
}
