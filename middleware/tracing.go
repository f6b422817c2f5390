package middleware

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/refusal"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/job"
)

// scopeName is the instrumentation scope of delayq's tracer and meter.
const scopeName = "github.com/delayq/delayq/middleware"

// systemName is the value of the messaging.system attribute.
const systemName = "delayq"

// Attribute keys of delayq's own span attributes (see docs/observability.md).
const (
	attrJobType        = attribute.Key("delayq.job.type")
	attrAttempt        = attribute.Key("delayq.job.attempt")
	attrLatenessMS     = attribute.Key("delayq.job.lateness_ms")
	attrReadyAt        = attribute.Key("delayq.job.ready_at")
	attrOutcome        = attribute.Key("delayq.job.outcome")
	attrRetryDelayMS   = attribute.Key("delayq.retry.delay_ms")
	attrPermanentError = attribute.Key("delayq.error.permanent")
	attrLostReason     = attribute.Key("delayq.lease.lost_reason")
	// attrRefused is set on a producer span whose envelope was refused as
	// its caller expected, e.g. a periodic tick another
	// scheduler enqueued first: the reason, with status Unset.
	attrRefused = attribute.Key("delayq.enqueue.refused")
)

// InjectTrace writes the trace context of ctx's span into the headers of
// each envelope (a copy of each map), as [EnqueueTracing] does for the
// envelopes it sees, for envelopes stored another way: the callbacks of a
// batch (broker.BatchSpec.OnSuccess, OnComplete), so that a callback's
// consumer span is a child of the span that created the batch. Nil
// envelopes are skipped; without a valid span in ctx nothing is written.
// Only the propagator option matters.
func InjectTrace(ctx context.Context, envs []*job.Envelope, opts ...TracingOption) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := tracingConfig{prop: defaultPropagator}
	for _, o := range opts {
		o(&c)
	}
	for _, env := range envs {
		if env == nil {
			continue
		}
		h := make(map[string]string, len(env.Headers)+2)
		maps.Copy(h, env.Headers)
		c.prop.Inject(ctx, propagation.MapCarrier(h))
		env.Headers = h
	}
}

// eventDeadLettered is the name of the span event added when a job is moved
// to the dead-letter store.
const eventDeadLettered = "delayq.dead_lettered"

// TracingOption configures [Tracing] and [EnqueueTracing].
type TracingOption func(*tracingConfig)

type tracingConfig struct {
	tp      trace.TracerProvider
	prop    propagation.TextMapPropagator
	newRoot bool
}

// WithTracerProvider sets the tracer provider. Default: the global one
// (otel.GetTracerProvider), looked up when the middleware is built; it
// follows a later otel.SetTracerProvider.
func WithTracerProvider(tp trace.TracerProvider) TracingOption {
	return func(c *tracingConfig) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithPropagator sets how trace context is written to and read from the
// envelope's headers. Default: W3C Trace Context plus W3C Baggage, whatever
// the global propagator is, because the headers travel between processes
// that must agree on them; pass otel.GetTextMapPropagator() to use the
// global one.
func WithPropagator(p propagation.TextMapPropagator) TracingOption {
	return func(c *tracingConfig) {
		if p != nil {
			c.prop = p
		}
	}
}

// WithNewTrace makes [Tracing] start a new trace for every attempt, linked to
// the producer's span, instead of continuing the producer's trace. Use it
// for jobs that run hours after the request that scheduled them, where one
// trace spanning hours is more confusing than useful. It has no effect on
// [EnqueueTracing].
func WithNewTrace() TracingOption {
	return func(c *tracingConfig) { c.newRoot = true }
}

// defaultPropagator is the propagator of [Tracing] and [EnqueueTracing]
// unless [WithPropagator] says otherwise: W3C Trace Context and Baggage.
// [Tracing] recognises it (by pointer) to read the common case, a
// traceparent alone, itself.
var defaultPropagator = &w3cPropagator{propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}

type w3cPropagator struct{ propagation.TextMapPropagator }

func newTracingConfig(opts []TracingOption) tracingConfig {
	c := tracingConfig{prop: defaultPropagator}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}

// EnqueueTracing is producer middleware: it starts one span of kind PRODUCER,
// named "send <queue>", per envelope enqueued (a batch gives one per
// envelope), as a child of the span in ctx, and writes that span's context
// into the envelope's Headers, so [Tracing] continues the trace wherever and
// whenever the job runs. Without a span in ctx, an envelope whose headers
// carry a trace context already (written by [InjectTrace], e.g. a batch
// callback) is sent as a child of that one; any other starts a new trace.
// A span whose envelope was not stored records the error with status
// Error, unless ctx expects the refusal (a periodic tick's duplicate, a
// batch callback's repeat).
//
// The envelope's Headers map is replaced by a copy, never written in place.
func EnqueueTracing(opts ...TracingOption) job.EnqueueMiddleware {
	c := newTracingConfig(opts)
	tracer := c.tp.Tracer(scopeName)
	return func(next job.Enqueuer) job.Enqueuer {
		return job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
			spans := make([]trace.Span, len(envs))
			spanInCtx := trace.SpanContextFromContext(ctx).IsValid()
			for i, env := range envs {
				if env == nil {
					continue // the broker refuses it
				}
				q := queueOf(env)
				attrs := []attribute.KeyValue{
					semconv.MessagingSystemKey.String(systemName),
					semconv.MessagingOperationName("send"),
					semconv.MessagingOperationTypeSend,
					semconv.MessagingDestinationName(q),
					attrJobType.String(env.Type),
				}
				if len(envs) > 1 {
					attrs = append(attrs, semconv.MessagingBatchMessageCount(len(envs)))
				}
				pctx := ctx
				if !spanInCtx && len(env.Headers) > 0 {
					// An envelope that carries its parent already (a
					// batch callback, middleware.InjectTrace) keeps it.
					if e := c.prop.Extract(ctx, propagation.MapCarrier(env.Headers)); trace.SpanContextFromContext(e).IsValid() {
						pctx = e
					}
				}
				sctx, span := tracer.Start(pctx, "send "+q, producerKind, trace.WithAttributes(attrs...))
				h := make(map[string]string, len(env.Headers)+2)
				maps.Copy(h, env.Headers)
				c.prop.Inject(sctx, propagation.MapCarrier(h))
				env.Headers = h
				spans[i] = span
			}
			err := next.Enqueue(ctx, envs...)
			errOf := errorsOf(err, len(envs))
			expected := refusal.Expected(ctx)
			for i, span := range spans {
				if span == nil {
					continue
				}
				env := envs[i]
				if env.ID != "" {
					span.SetAttributes(semconv.MessagingMessageID(env.ID))
				}
				if e := errOf(i); e != nil && expected != nil && expected(e) {
					// Refused as the caller expects (internal/refusal): not
					// stored, not an error.
					span.SetAttributes(attrRefused.String(statusText(e)))
				} else if e != nil {
					span.RecordError(e)
					span.SetStatus(codes.Error, statusText(e))
				} else if !env.ReadyAt.IsZero() {
					span.SetAttributes(attrReadyAt.String(env.ReadyAt.UTC().Format(time.RFC3339Nano)))
				}
				span.End()
			}
			return err
		})
	}
}

// Tracing is handler middleware: it starts one span of kind CONSUMER, named
// "process <queue>", per attempt. Its parent is the producer's span read from
// the envelope's headers (see [EnqueueTracing]), so the handler's spans join
// the trace of the request that scheduled the job, across processes; with
// [WithNewTrace] it starts a new trace linked to the producer's span instead.
// A job without trace headers starts a new trace.
//
// The span ends when the handler returns, but is finished only once the
// worker settled the attempt (job.OnResult): its delayq.job.outcome says
// whether the job was acknowledged, retried, dead-lettered or its lease lost.
// A failed attempt records its error with status Error; a permanent error
// (retry.Permanent) sets delayq.error.permanent, and a dead-lettering adds
// the event delayq.dead_lettered.
func Tracing(opts ...TracingOption) job.Middleware {
	c := newTracingConfig(opts)
	ct := &consumerTracer{tracer: c.tp.Tracer(scopeName), prop: c.prop, newRoot: c.newRoot,
		w3c: c.prop == propagation.TextMapPropagator(defaultPropagator)}
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			ctx, span := ct.start(ctx, m)
			if !span.IsRecording() {
				// Not sampled, or no SDK: nothing to record the result on.
				defer span.End()
				return next.Handle(ctx, m)
			}
			a := consumerAttempts.Get().(*consumerAttempt)
			a.span, a.m = span, m
			return observeAttempt(ctx, m, next, a)
		})
	}
}

// Span kinds as start options, made once.
var (
	consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)
	producerKind = trace.WithSpanKind(trace.SpanKindProducer)
)

type consumerTracer struct {
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	newRoot bool
	w3c     bool     // prop is defaultPropagator
	names   sync.Map // queue → span name
}

// start starts an attempt's span. It is a function of its own so that its
// large frame is gone while the handler runs on the job's goroutine, whose
// stack then grows less often.
func (ct *consumerTracer) start(ctx context.Context, m *job.Message) (context.Context, trace.Span) {
	// Drop any span of the worker's context: the parent comes from the
	// headers or there is none.
	if trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	pctx := ct.extract(ctx, m.Headers)
	q := m.Queue
	if q == "" {
		q = naming.DefaultQueue
	}
	// No attributes at the start: an attempt that is not sampled then costs
	// no attribute slices at all, and a recorded one gets them all in one
	// call with its result (see consumerAttempt.done).
	name := ct.spanName(q)
	if ct.newRoot {
		if producer := trace.SpanContextFromContext(pctx); producer.IsValid() {
			return ct.tracer.Start(pctx, name, consumerKind, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: producer}))
		}
	}
	return ct.tracer.Start(pctx, name, consumerKind)
}

// extract returns ctx with the producer's span context and baggage read
// from the headers.
func (ct *consumerTracer) extract(ctx context.Context, headers map[string]string) context.Context {
	if ct.w3c {
		if sc, ok := traceparentOnly(headers); ok {
			return trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return ct.prop.Extract(ctx, propagation.MapCarrier(headers))
}

// traceparentOnly reads the span context of headers that hold a valid
// version-00 traceparent in lower-case hex and no tracestate or baggage, the
// headers EnqueueTracing writes for a span without either. For those it
// gives what defaultPropagator's Extract gives, without its general
// parsing; for any other headers it reports false, and the propagator reads
// them.
func traceparentOnly(headers map[string]string) (trace.SpanContext, bool) {
	tp := headers["traceparent"]
	// 00-<trace id: 32>-<span id: 16>-<flags: 2>
	if len(tp) != 55 || tp[0] != '0' || tp[1] != '0' || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' ||
		headers["tracestate"] != "" || headers["baggage"] != "" {
		return trace.SpanContext{}, false
	}
	var c trace.SpanContextConfig
	var flags [1]byte
	if !lowerHex(c.TraceID[:], tp[3:35]) || !lowerHex(c.SpanID[:], tp[36:52]) || !lowerHex(flags[:], tp[53:55]) || flags[0] > 3 {
		return trace.SpanContext{}, false
	}
	c.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	c.Remote = true
	sc := trace.NewSpanContext(c)
	return sc, sc.IsValid()
}

// lowerHex decodes src, lower-case hex of 2*len(dst) digits, into dst.
func lowerHex(dst []byte, src string) bool {
	invalid := byte(0)
	for i := range dst {
		hi, lo := hexValue[src[2*i]], hexValue[src[2*i+1]]
		dst[i] = hi<<4 | lo
		invalid |= hi | lo
	}
	return invalid&0xf0 == 0
}

// hexValue maps a lower-case hex digit to its value and any other byte to
// 0xff.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()

// spanName returns "process <queue>", made once per queue.
func (ct *consumerTracer) spanName(q string) string {
	if v, ok := ct.names.Load(q); ok {
		return v.(string)
	}
	name := "process " + q
	ct.names.Store(q, name)
	return name
}

// consumerAttempt is what Tracing keeps of one recorded attempt until the
// worker settles it. They are pooled: with its callback bound once and room
// for the attributes, an attempt's bookkeeping allocates nothing.
type consumerAttempt struct {
	span trace.Span
	m    *job.Message
	end  time.Time
	cb   func(job.Result) // a.settled, bound once
	kvs  [12]attribute.KeyValue
	opts [1]trace.SpanEndOption
}

var consumerAttempts sync.Pool

func init() {
	// Set here: New refers to done, which puts into the pool.
	consumerAttempts.New = func() any {
		a := &consumerAttempt{}
		a.cb = a.settled
		return a
	}
}

func (a *consumerAttempt) callback() func(job.Result) { return a.cb }
func (a *consumerAttempt) returned()                  { a.end = time.Now() }
func (a *consumerAttempt) settled(res job.Result)     { a.done(res, a.end) }

// done records the message's attributes and the attempt's result on the
// span, ends it at end and puts a back in the pool: the callback runs once
// (job.OnResult), and nothing holds a afterwards.
func (a *consumerAttempt) done(res job.Result, end time.Time) {
	span, m := a.span, a.m
	// One SetAttributes call: each call may copy the span's attributes.
	// The SDK copies them, so a.kvs is free again once it returned.
	q := m.Queue
	if q == "" {
		q = naming.DefaultQueue
	}
	kvs := append(a.kvs[:0],
		semconv.MessagingSystemKey.String(systemName),
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(q),
		semconv.MessagingMessageID(m.ID),
		attrJobType.String(m.Type),
		attrAttempt.Int(m.Attempt),
		attrLatenessMS.Int64(max(m.Lateness(), 0).Milliseconds()),
		attrOutcome.String(res.Outcome.String()),
	)
	if res.Err != nil {
		kvs = append(kvs, semconv.ErrorType(res.Err))
		if retrydecide.IsPermanent(res.Err) {
			kvs = append(kvs, attrPermanentError.Bool(true))
		}
	}
	switch res.Outcome {
	case job.OutcomeRetry:
		kvs = append(kvs, attrRetryDelayMS.Int64(res.Delay.Milliseconds()))
	case job.OutcomeLeaseLost:
		if res.Lost != nil {
			kvs = append(kvs, attrLostReason.String(statusText(res.Lost)))
		}
	}
	span.SetAttributes(kvs...)
	if res.Err != nil {
		span.RecordError(res.Err, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, statusText(res.Err))
	} else if res.Outcome == job.OutcomeLeaseLost {
		span.SetStatus(codes.Error, "lease lost: the job was or will be handled again")
	}
	if res.Outcome == job.OutcomeDead {
		span.AddEvent(eventDeadLettered, trace.WithTimestamp(end))
	}
	a.opts[0] = trace.WithTimestamp(end)
	span.End(a.opts[:]...)
	// a.kvs keeps its strings (ids, names, an error's text) until it is
	// used again or the pool is emptied at a collection: a few hundred
	// bytes, cheaper to keep than to clear on every attempt.
	a.opts[0] = nil
	a.span, a.m, a.end = nil, nil, time.Time{}
	consumerAttempts.Put(a)
}

// statusText is the first line of err's message, at most 256 bytes: enough
// for a status description (the full text is in the exception event).
func statusText(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 256 {
		s = s[:256] + "…"
	}
	return s
}
