package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

type testBundle struct {
	ctx context.Context
	rdb redis.UniversalClient
	ns  string
	b   *broker.Broker
	reg *job.Registry
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{ctx: context.Background(), rdb: rdb, ns: ns, b: b, reg: job.NewRegistry()}
}

func (tb *testBundle) key(queue, name string) string { return tb.ns + ":{" + queue + "}:" + name }

// config returns a worker config for the bundle with fast defaults for tests.
func (tb *testBundle) config(t *testing.T) worker.Config {
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	return worker.Config{
		Broker:   tb.b,
		Registry: tb.reg,
		Lease:    5 * time.Second,
		MaxIdle:  time.Second,
		Logger:   &logger,
	}
}

// start runs a worker until the test ends or the returned stop is called;
// stop waits for Run to return.
func start(t *testing.T, cfg worker.Config) (stop func()) {
	t.Helper()
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// queueKeysEmpty fails the test if any job-holding key of queue is left.
func (tb *testBundle) queueKeysEmpty(t *testing.T, queue string) {
	t.Helper()
	for _, k := range []string{"scheduled", "processing", "jobs", "attempts", "leases", "dead", "dead:index"} {
		if n, err := tb.rdb.Exists(tb.ctx, tb.key(queue, k)).Result(); err != nil || n != 0 {
			t.Errorf("key %s left behind (%v)", k, err)
		}
	}
}

// recorder wraps the broker to observe what a worker asks of it.
type recorder struct {
	*broker.Broker
	mu      sync.Mutex
	ackErrs []error
	retries []retryCall
}

type retryCall struct {
	id    string
	delay time.Duration
	ready time.Time
}

func (r *recorder) Ack(ctx context.Context, leases ...broker.Lease) error {
	err := r.Broker.Ack(ctx, leases...)
	r.mu.Lock()
	r.ackErrs = append(r.ackErrs, err)
	r.mu.Unlock()
	return err
}

func (r *recorder) Retry(ctx context.Context, l broker.Lease, delay time.Duration, env *job.Envelope) (time.Time, error) {
	ready, err := r.Broker.Retry(ctx, l, delay, env)
	if err == nil {
		r.mu.Lock()
		r.retries = append(r.retries, retryCall{l.ID, delay, ready})
		r.mu.Unlock()
	}
	return ready, err
}

func (r *recorder) retryCalls() []retryCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]retryCall(nil), r.retries...)
}

func (r *recorder) ackErrors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.ackErrs...)
}
