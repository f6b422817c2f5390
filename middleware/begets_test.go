package middleware_test

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/periodic"
	"github.com/delayq/delayq/worker"
)

// TestTracesFollowJobsThatJobsEnqueue: jobs that jobs and the scheduler
// enqueue stay in their parent's trace and are counted. A chain of three
// jobs (the second stored with the first's ack, the third in another queue
// enqueued before the second's ack), a batch whose member succeeds and
// fires its success callback, and a periodic tick: each job's consumer span
// has a producer span for its parent, whose parent is the span that
// enqueued it (the previous step's consumer span; the span that created
// the batch; none for a tick, whose trace starts at the scheduler's
// producer span). messaging.client.sent.messages equals the jobs stored, counted as
// the distinct jobs that ran once every queue is empty.
func TestTracesFollowJobsThatJobsEnqueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sr, tp := newTracing(t)
	m := newMeter(t)
	mws := []job.EnqueueMiddleware{
		middleware.EnqueueTracing(middleware.WithTracerProvider(tp)),
		middleware.EnqueueMetrics(middleware.WithMeterProvider(m.mp)),
	}
	producer := job.ChainEnqueuer(tb.b, mws...)

	var mu sync.Mutex
	ran := map[string]int{} // job id → runs
	seen := func(m *job.Message) {
		mu.Lock()
		defer mu.Unlock()
		ran[m.ID]++
	}
	step1 := job.New[payload]("begets.step1")
	step2 := job.New[payload]("begets.step2")
	step3 := job.New[payload]("begets.step3", job.Queue("other"))
	member := job.New[payload]("begets.member")
	callback := job.New[payload]("begets.callback")
	tick := job.New[payload]("begets.tick", job.Queue("ticks"))
	step1.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		seen(j.Message)
		env, err := step2.Envelope(payload{N: 2})
		if err != nil {
			return err
		}
		return job.Next(ctx, env)
	})
	step2.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		seen(j.Message)
		env, err := step3.Envelope(payload{N: 3})
		if err != nil {
			return err
		}
		return job.Next(ctx, env)
	})
	for _, typ := range []*job.Type[payload]{step3, member, callback, tick} {
		typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
			seen(j.Message)
			return nil
		})
	}

	cfg := tb.config(t)
	cfg.Queues = []worker.Queue{{Name: naming.DefaultQueue}, {Name: "other"}, {Name: "ticks"}}
	cfg.Enqueue = mws
	run(t, cfg, middleware.Tracing(middleware.WithTracerProvider(tp)))

	tracer := tp.Tracer("test")
	// The chain.
	rootCtx, root := tracer.Start(tb.ctx, "request")
	if _, err := step1.Enqueue(rootCtx, producer, payload{N: 1}); err != nil {
		t.Fatal(err)
	}
	root.End()
	// The batch: its callback carries the creator's trace context, its
	// member is added through the producer middleware.
	batchCtx, creator := tracer.Start(tb.ctx, "create batch")
	cb, err := callback.Envelope(payload{})
	if err != nil {
		t.Fatal(err)
	}
	middleware.InjectTrace(batchCtx, []*job.Envelope{cb})
	id, err := tb.b.CreateBatch(batchCtx, broker.BatchSpec{OnSuccess: cb})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := member.Envelope(payload{})
	if err != nil {
		t.Fatal(err)
	}
	addTo := job.ChainEnqueuer(job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
		return tb.b.AddToBatch(ctx, id, envs...)
	}), mws...)
	if err := addTo.Enqueue(batchCtx, mem); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(batchCtx, id); err != nil {
		t.Fatal(err)
	}
	creator.End()
	// The tick.
	s, err := periodic.New(tb.b, periodic.Options{Enqueue: mws, Logger: tb.Config(t).Logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := periodic.Add(s, "begets", "@every 1s", tick, payload{}); err != nil {
		t.Fatal(err)
	}
	sctx, stopScheduler := context.WithCancel(context.Background())
	schedDone := make(chan error, 1)
	go func() { schedDone <- s.Run(sctx) }()

	processed := func(typ string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, sp := range sr.Ended() {
			if sp.SpanKind() == trace.SpanKindConsumer && attrs(sp)[middleware.AttrJobType].AsString() == typ {
				out = append(out, sp)
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, typ := range []string{"begets.step3", "begets.callback", "begets.tick"} {
		for len(processed(typ)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no %s job ran within 20s", typ)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stopScheduler()
	if err := <-schedDone; err != nil {
		t.Errorf("scheduler Run: %v", err)
	}

	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range sr.Ended() {
		byID[sp.SpanContext().SpanID()] = sp
	}
	// sentBy checks that span c's parent is a producer span whose parent
	// is want (or, for an invalid want, none), all in want's trace.
	sentBy := func(name string, c sdktrace.ReadOnlySpan, want trace.SpanContext) {
		t.Helper()
		send, ok := byID[c.Parent().SpanID()]
		if !ok || send.SpanKind() != trace.SpanKindProducer {
			t.Errorf("%s: consumer span's parent %s is not a recorded producer span", name, c.Parent().SpanID())
			return
		}
		if got, id := attrs(send)["messaging.message.id"].AsString(), attrs(c)["messaging.message.id"].AsString(); got != id {
			t.Errorf("%s: producer span's message id %q, consumer's %q", name, got, id)
		}
		if want.IsValid() {
			if send.Parent().SpanID() != want.SpanID() || c.SpanContext().TraceID() != want.TraceID() {
				t.Errorf("%s: producer span's parent %s in trace %s, want %s in trace %s", name, send.Parent().SpanID(), c.SpanContext().TraceID(), want.SpanID(), want.TraceID())
			}
		} else if send.Parent().IsValid() || c.SpanContext().TraceID() != send.SpanContext().TraceID() {
			t.Errorf("%s: producer span has parent %s, trace %s vs %s", name, send.Parent().SpanID(), send.SpanContext().TraceID(), c.SpanContext().TraceID())
		}
	}
	one := func(typ string) sdktrace.ReadOnlySpan {
		t.Helper()
		spans := processed(typ)
		if len(spans) != 1 {
			t.Fatalf("%d consumer spans of %s, want 1", len(spans), typ)
		}
		return spans[0]
	}
	s1, s2, s3 := one("begets.step1"), one("begets.step2"), one("begets.step3")
	sentBy("step 1", s1, root.SpanContext())
	sentBy("step 2", s2, s1.SpanContext())
	sentBy("step 3", s3, s2.SpanContext())
	sentBy("member", one("begets.member"), creator.SpanContext())
	sentBy("callback", one("begets.callback"), creator.SpanContext())
	for _, sp := range processed("begets.tick") {
		sentBy("tick", sp, trace.SpanContext{})
	}

	// Every queue empty: each job stored ran once (the tick's job ids
	// are distinct), and the counter counted each once.
	for _, q := range []string{naming.DefaultQueue, "other", "ticks"} {
		for {
			st, err := testkit.OneStats(tb.b.Stats(tb.ctx, q))
			if err != nil {
				t.Fatal(err)
			}
			if st.Scheduled == 0 && st.Processing == 0 && st.Dead == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue %s not empty: %+v", q, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	mu.Lock()
	stored := int64(len(ran))
	for id, n := range ran {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	mu.Unlock()
	if got := sum(m.collect(), middleware.MetricEnqueued, nil); got != stored {
		t.Errorf("%s = %d, want the %d jobs stored", middleware.MetricEnqueued, got, stored)
	}
	if stored < 6 {
		t.Errorf("%d jobs ran, want at least 6", stored)
	}
}
