package middleware_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

type payload struct {
	N int `json:"n"`
}

// fast retries after 10ms, so retried jobs come back quickly.
var fast = job.WithBackoff(retry.Exponential{Initial: 10 * time.Millisecond, Multiplier: 1, Max: 10 * time.Millisecond})

type testBundle struct {
	*testkit.Bundle
	ctx context.Context
	rdb redis.UniversalClient
	ns  string
	b   *broker.Broker
	reg *job.Registry
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	bd := testkit.Setup(t)
	return &testBundle{Bundle: bd, ctx: bd.Ctx, rdb: bd.RDB, ns: bd.NS, b: bd.B, reg: bd.Reg}
}

func (tb *testBundle) key(queue, name string) string { return tb.Key(queue, name) }

// otherProcess returns a broker over a client of its own on the same
// namespace: a producer in another process, as far as Redis can tell.
func (tb *testBundle) otherProcess(t testing.TB) *broker.Broker {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// config is a worker config for the bundle with a warn-level test logger.
func (tb *testBundle) config(t testing.TB) worker.Options { return tb.Config(t) }

// run starts a worker with mws added by Use until the test ends or stop is
// called; stop waits for Run to return.
func run(t testing.TB, cfg worker.Options, mws ...job.Middleware) (stop func()) {
	t.Helper()
	return testkit.StartWorker(t, cfg, mws...)
}

// newTracing returns a tracer provider that records ended spans.
func newTracing(t testing.TB) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return sr, tp
}

// spansNamed returns the ended spans with the given name, in end order.
func spansNamed(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// lockedBuffer is a bytes.Buffer safe for the worker's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
