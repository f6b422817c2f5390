package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/attempt"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/refusal"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

func TestTracingProducerToConsumer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		newTrace bool
	}{
		{"child of producer", false},
		{"new trace linked to producer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			prodSR, prodTP := newTracing(t)
			consSR, consTP := newTracing(t)

			typ := job.New[payload]("email.welcome")
			var handlerSpan trace.SpanContext
			var mu sync.Mutex
			typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
				mu.Lock()
				handlerSpan = trace.SpanContextFromContext(ctx)
				mu.Unlock()
				return nil
			})

			// The producer: its own client, broker and tracer provider.
			enq := job.ChainEnqueuer(tb.otherProcess(t), middleware.EnqueueTracing(middleware.WithTracerProvider(prodTP)))
			ctx, request := prodTP.Tracer("app").Start(tb.ctx, "POST /signup")
			env, err := typ.Enqueue(ctx, enq, payload{N: 1}, job.In(20*time.Millisecond))
			request.End()
			if err != nil {
				t.Fatal(err)
			}

			opts := []middleware.TracingOption{middleware.WithTracerProvider(consTP)}
			if tc.newTrace {
				opts = append(opts, middleware.WithNewTrace())
			}
			run(t, tb.config(t), middleware.Tracing(opts...))
			redistest.WaitFor(t, 10*time.Second, "consumer span", func() bool { return len(spansNamed(consSR, "process default")) == 1 })

			producers := spansNamed(prodSR, "send default")
			if len(producers) != 1 {
				t.Fatalf("%d producer spans, want 1", len(producers))
			}
			prod, cons := producers[0], spansNamed(consSR, "process default")[0]
			if prod.SpanKind() != trace.SpanKindProducer || cons.SpanKind() != trace.SpanKindConsumer {
				t.Fatalf("kinds producer=%v consumer=%v", prod.SpanKind(), cons.SpanKind())
			}
			if prod.Parent().SpanID() != request.SpanContext().SpanID() {
				t.Fatalf("producer span's parent %v, want the request span %v", prod.Parent().SpanID(), request.SpanContext().SpanID())
			}
			if tc.newTrace {
				if cons.SpanContext().TraceID() == prod.SpanContext().TraceID() || cons.Parent().IsValid() {
					t.Fatalf("consumer span continues the producer's trace (parent %v)", cons.Parent())
				}
				links := cons.Links()
				if len(links) != 1 || links[0].SpanContext.SpanID() != prod.SpanContext().SpanID() || links[0].SpanContext.TraceID() != prod.SpanContext().TraceID() {
					t.Fatalf("consumer links %+v, want one to the producer span", links)
				}
			} else {
				if cons.Parent().SpanID() != prod.SpanContext().SpanID() || !cons.Parent().IsRemote() {
					t.Fatalf("consumer parent %v, want the remote producer span %v", cons.Parent(), prod.SpanContext().SpanID())
				}
				if cons.SpanContext().TraceID() != request.SpanContext().TraceID() {
					t.Fatalf("consumer trace %v, want the request's %v", cons.SpanContext().TraceID(), request.SpanContext().TraceID())
				}
			}
			mu.Lock()
			if handlerSpan.SpanID() != cons.SpanContext().SpanID() {
				t.Errorf("handler's context carries span %v, want the consumer span %v", handlerSpan.SpanID(), cons.SpanContext().SpanID())
			}
			mu.Unlock()

			pa := attrs(prod)
			for k, want := range map[attribute.Key]string{
				"messaging.system":           "delayq",
				"messaging.operation.name":   "send",
				"messaging.operation.type":   "send",
				"messaging.destination.name": "default",
				"messaging.message.id":       env.ID,
				"delayq.job.type":            "email.welcome",
			} {
				if got := pa[k].AsString(); got != want {
					t.Errorf("producer attribute %s = %q, want %q", k, got, want)
				}
			}
			if pa["delayq.job.ready_at"].AsString() == "" {
				t.Error("producer span has no delayq.job.ready_at")
			}
			ca := attrs(cons)
			for k, want := range map[attribute.Key]string{
				"messaging.system":           "delayq",
				"messaging.operation.name":   "process",
				"messaging.operation.type":   "process",
				"messaging.destination.name": "default",
				"messaging.message.id":       env.ID,
				"delayq.job.type":            "email.welcome",
				"delayq.job.outcome":         "success",
			} {
				if got := ca[k].AsString(); got != want {
					t.Errorf("consumer attribute %s = %q, want %q", k, got, want)
				}
			}
			if got := ca["delayq.job.attempt"].AsInt64(); got != 1 {
				t.Errorf("delayq.job.attempt = %d, want 1", got)
			}
			if v, ok := ca["delayq.job.lateness_ms"]; !ok || v.AsInt64() < 0 {
				t.Errorf("delayq.job.lateness_ms = %v (present %v), want >= 0", v.AsInt64(), ok)
			}
			if cons.Status().Code != codes.Unset {
				t.Errorf("consumer status %v, want unset", cons.Status())
			}
		})
	}
}

func TestTracingRetriesShareTheTrace(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sr, tp := newTracing(t)
	typ := job.New[payload]("flaky.call", job.MaxRetries(5))
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if j.Attempt <= 2 {
			return fmt.Errorf("upstream unavailable (attempt %d)", j.Attempt)
		}
		return nil
	})
	enq := job.ChainEnqueuer(tb.b, middleware.EnqueueTracing(middleware.WithTracerProvider(tp)))
	ctx, request := tp.Tracer("app").Start(tb.ctx, "request")
	if _, err := typ.Enqueue(ctx, enq, payload{}, fast); err != nil {
		t.Fatal(err)
	}
	request.End()
	run(t, tb.config(t), middleware.Tracing(middleware.WithTracerProvider(tp)))
	redistest.WaitFor(t, 10*time.Second, "three consumer spans", func() bool { return len(spansNamed(sr, "process default")) == 3 })

	prod := spansNamed(sr, "send default")[0]
	for i, s := range spansNamed(sr, "process default") {
		a := attrs(s)
		if s.SpanContext().TraceID() != request.SpanContext().TraceID() || s.Parent().SpanID() != prod.SpanContext().SpanID() {
			t.Errorf("attempt %d: not a child of the producer span in the request's trace", i+1)
		}
		if got := a["delayq.job.attempt"].AsInt64(); got != int64(i+1) {
			t.Errorf("span %d has attempt %d", i+1, got)
		}
		if i < 2 {
			if s.Status().Code != codes.Error || a["delayq.job.outcome"].AsString() != "retry" {
				t.Errorf("attempt %d: status %v outcome %q, want Error and retry", i+1, s.Status(), a["delayq.job.outcome"].AsString())
			}
			if !hasEvent(s, "exception") {
				t.Errorf("attempt %d: error not recorded as an exception event", i+1)
			}
			if a["delayq.retry.delay_ms"].AsInt64() != 10 {
				t.Errorf("attempt %d: delayq.retry.delay_ms = %d, want 10", i+1, a["delayq.retry.delay_ms"].AsInt64())
			}
		} else if s.Status().Code != codes.Unset || a["delayq.job.outcome"].AsString() != "success" {
			t.Errorf("attempt 3: status %v outcome %q, want unset and success", s.Status(), a["delayq.job.outcome"].AsString())
		}
	}
}

func TestTracingPermanentDeadLetter(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sr, tp := newTracing(t)
	typ := job.New[payload]("bad.input")
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		return retry.Permanent(errors.New("address does not exist"))
	})
	enq := job.ChainEnqueuer(tb.b, middleware.EnqueueTracing(middleware.WithTracerProvider(tp)))
	if _, err := typ.Enqueue(tb.ctx, enq, payload{}); err != nil {
		t.Fatal(err)
	}
	run(t, tb.config(t), middleware.Tracing(middleware.WithTracerProvider(tp)))
	redistest.WaitFor(t, 10*time.Second, "consumer span", func() bool { return len(spansNamed(sr, "process default")) == 1 })
	s := spansNamed(sr, "process default")[0]
	a := attrs(s)
	if s.Status().Code != codes.Error || s.Status().Description != "address does not exist" {
		t.Errorf("status %+v, want Error with the message", s.Status())
	}
	if a["delayq.job.outcome"].AsString() != "dead" || !a["delayq.error.permanent"].AsBool() {
		t.Errorf("outcome %q permanent %v, want dead and true", a["delayq.job.outcome"].AsString(), a["delayq.error.permanent"].AsBool())
	}
	if !hasEvent(s, middleware.EventDeadLettered) {
		t.Errorf("no %s event", middleware.EventDeadLettered)
	}
}

func TestEnqueueTracingRecordsRefusedEnvelopes(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sr, tp := newTracing(t)
	enq := job.ChainEnqueuer(tb.b, middleware.EnqueueTracing(middleware.WithTracerProvider(tp)))
	shared := map[string]string{"tenant": "acme"}
	a := &job.Envelope{ID: "dup", Type: "t", Headers: shared}
	if err := enq.Enqueue(tb.ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, ok := shared["traceparent"]; ok {
		t.Fatal("the caller's header map was written in place")
	}
	if a.Headers["tenant"] != "acme" || a.Headers["traceparent"] == "" {
		t.Fatalf("headers %v, want the caller's plus traceparent", a.Headers)
	}
	b, c := &job.Envelope{ID: "dup", Type: "t"}, &job.Envelope{ID: "fresh", Type: "t"}
	if err := enq.Enqueue(tb.ctx, b, c); err == nil {
		t.Fatal("duplicate id accepted")
	}
	spans := spansNamed(sr, "send default")
	if len(spans) != 3 {
		t.Fatalf("%d producer spans, want one per envelope (3)", len(spans))
	}
	if spans[0].Status().Code != codes.Unset || spans[1].Status().Code != codes.Error || spans[2].Status().Code != codes.Unset {
		t.Fatalf("statuses %v %v %v, want only the duplicate's Error", spans[0].Status(), spans[1].Status(), spans[2].Status())
	}
	if n := attrs(spans[2])["messaging.batch.message_count"].AsInt64(); n != 2 {
		t.Errorf("messaging.batch.message_count = %d, want 2", n)
	}
}

func TestTracingOutsideWorker(t *testing.T) {
	t.Parallel()
	sr, tp := newTracing(t)
	h := middleware.Tracing(middleware.WithTracerProvider(tp), middleware.WithPropagator(propagation.TraceContext{}))
	m := &job.Message{Envelope: job.Envelope{ID: "x", Queue: "q", Type: "t", MaxRetries: 1}, Attempt: 1}
	err := h(job.HandlerFunc(func(context.Context, *job.Message) error { return errors.New("fails") })).Handle(context.Background(), m)
	if err == nil {
		t.Fatal("the handler's error was lost")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		_ = h(job.HandlerFunc(func(context.Context, *job.Message) error { panic("boom") })).Handle(context.Background(), m)
	}()
	spans := spansNamed(sr, "process q")
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	if got := attrs(spans[0])["delayq.job.outcome"].AsString(); got != "retry" || spans[0].Status().Code != codes.Error {
		t.Errorf("judged outcome %q status %v, want retry and Error", got, spans[0].Status())
	}
	if got := attrs(spans[1])["delayq.job.outcome"].AsString(); got != "unknown" || spans[1].Status().Code != codes.Error {
		t.Errorf("panicking span: outcome %q status %v, want unknown and Error", got, spans[1].Status())
	}
	if spans[0].Parent().IsValid() {
		t.Error("a message without trace headers got a parent span")
	}
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

func TestTracingUnsampledPassesContextOn(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	env := &job.Envelope{ID: "u1", Type: "t"}
	enq := middleware.EnqueueTracing(middleware.WithTracerProvider(tp))(job.EnqueuerFunc(func(context.Context, ...*job.Envelope) error { return nil }))
	if err := enq.Enqueue(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	producer := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(env.Headers))
	if !trace.SpanContextFromContext(producer).IsValid() {
		t.Fatalf("no trace context injected for an unsampled span: %v", env.Headers)
	}
	var seen trace.SpanContext
	h := middleware.Tracing(middleware.WithTracerProvider(tp))(job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		seen = trace.SpanContextFromContext(ctx)
		return nil
	}))
	ctx, a := attempt.With[job.Envelope, job.Result, job.Progress](context.Background(), nil)
	settle := a.Settle
	if err := h.Handle(ctx, &job.Message{Envelope: *env, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	settle(job.Result{Outcome: job.OutcomeSuccess})
	if seen.TraceID() != trace.SpanContextFromContext(producer).TraceID() || seen.IsSampled() {
		t.Fatalf("handler's span context %v, want the producer's trace, unsampled", seen)
	}
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans recorded with NeverSample", n)
	}
}

func TestMetricsWithoutSDKPassesThrough(t *testing.T) {
	t.Parallel()
	called := false
	h := middleware.Metrics(middleware.WithMeterProvider(metricnoop.NewMeterProvider()))(job.HandlerFunc(func(context.Context, *job.Message) error {
		called = true
		return errors.New("fails")
	}))
	if err := h.Handle(context.Background(), &job.Message{}); err == nil || !called {
		t.Fatalf("handler called %v, error %v: want the handler's error passed through", called, err)
	}
}

// TestEnqueueTracingExpectedRefusals: under refusal.Expect, a refusal the
// caller expects (a duplicate) leaves its span's status Unset and says why
// in delayq.enqueue.refused; any other refusal is still an error. Without
// a span in the context, an envelope whose headers carry a trace context
// (InjectTrace) is sent as its child; InjectTrace without a span writes
// nothing.
func TestEnqueueTracingExpectedRefusals(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sr, tp := newTracing(t)
	enq := job.ChainEnqueuer(tb.b, middleware.EnqueueTracing(middleware.WithTracerProvider(tp)))
	if err := enq.Enqueue(tb.ctx, &job.Envelope{ID: "dup", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	ctx := refusal.Expect(tb.ctx, func(err error) bool { return errors.Is(err, broker.ErrDuplicate) })
	dup, bad := &job.Envelope{ID: "dup", Type: "t"}, &job.Envelope{ID: "bad", Type: "t", Queue: "no spaces"}
	if err := enq.Enqueue(ctx, dup); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := enq.Enqueue(ctx, bad); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("bad queue: %v", err)
	}
	var dupSpan, badSpan sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		switch attrs(s)["messaging.message.id"].AsString() {
		case "dup":
			dupSpan = s // the last one: the refused
		case "bad":
			badSpan = s
		}
	}
	if dupSpan == nil || dupSpan.Status().Code != codes.Unset || attrs(dupSpan)[middleware.AttrRefused].AsString() == "" {
		t.Errorf("expected duplicate: span %v", dupSpan)
	}
	if badSpan == nil || badSpan.Status().Code != codes.Error || attrs(badSpan)[middleware.AttrRefused].AsString() != "" {
		t.Errorf("invalid envelope under refusal.Expect: span %v, want status Error", badSpan)
	}

	none := &job.Envelope{Type: "t"}
	middleware.InjectTrace(tb.ctx, []*job.Envelope{none, nil})
	if len(none.Headers) != 0 {
		t.Errorf("InjectTrace without a span wrote %v", none.Headers)
	}
	pctx, parent := tp.Tracer("test").Start(tb.ctx, "creator")
	carried := &job.Envelope{ID: "carried", Type: "t", Headers: map[string]string{"tenant": "acme"}}
	shared := carried.Headers
	middleware.InjectTrace(pctx, []*job.Envelope{carried})
	parent.End()
	if carried.Headers["traceparent"] == "" || carried.Headers["tenant"] != "acme" || shared["traceparent"] != "" {
		t.Fatalf("InjectTrace: headers %v, caller's map %v", carried.Headers, shared)
	}
	if err := enq.Enqueue(tb.ctx, carried); err != nil {
		t.Fatal(err)
	}
	var send sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if attrs(s)["messaging.message.id"].AsString() == "carried" {
			send = s
		}
	}
	if send == nil || send.Parent().SpanID() != parent.SpanContext().SpanID() || send.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("send span of an envelope carrying a trace: %v, want a child of %s", send, parent.SpanContext().SpanID())
	}
}
