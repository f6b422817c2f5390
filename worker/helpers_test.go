package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

type testBundle struct {
	*testkit.Bundle
	ctx context.Context
	rdb redis.UniversalClient
	ns  string
	b   *broker.Broker
	reg *job.Registry
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	bd := testkit.Setup(t)
	return &testBundle{Bundle: bd, ctx: bd.Ctx, rdb: bd.RDB, ns: bd.NS, b: bd.B, reg: bd.Reg}
}

func (tb *testBundle) key(queue, name string) string { return tb.Key(queue, name) }

// config returns a worker config for the bundle with fast defaults for tests.
func (tb *testBundle) config(t *testing.T) worker.Options { return tb.Config(t) }

// start runs a worker until the test ends or the returned stop is called;
// stop waits for Run to return.
func start(t *testing.T, cfg worker.Options) (stop func()) {
	t.Helper()
	return testkit.StartWorker(t, cfg)
}

// wrapped returns cfg with a broker of its own whose worker protocol is
// wrap of the real one: the failure-injecting seam.
func (tb *testBundle) wrapped(t *testing.T, cfg worker.Options, wrap func(protocol.Broker) protocol.Broker) worker.Options {
	t.Helper()
	b := testkit.NewBroker(t, tb.rdb, broker.Options{Namespace: tb.ns})
	protocol.Intercept(t, b, wrap)
	cfg.Broker = b
	return cfg
}

// queueKeysEmpty fails the test if any job-holding key of queue is left
// (the attempts and leases hashes stay with keyspace.EncodingField only).
func (tb *testBundle) queueKeysEmpty(t *testing.T, queue string) {
	t.Helper()
	ks := testkit.Keys(t, tb.b, queue)
	for _, k := range ks.JobKeys() {
		if k == ks.Attempts || k == ks.Leases || k == ks.Running {
			if f, err := tb.rdb.HKeys(tb.ctx, k).Result(); err != nil || len(f) > 1 || (len(f) == 1 && f[0] != keyspace.EncodingField) {
				t.Errorf("%s holds %v (%v), want no job", k, f, err)
			}
			continue
		}
		if n, err := tb.rdb.Exists(tb.ctx, k).Result(); err != nil || n != 0 {
			t.Errorf("key %s left behind (%v)", k, err)
		}
	}
}

// recorder wraps the broker to observe what a worker asks of it.
type recorder struct {
	protocol.Broker
	mu      sync.Mutex
	ackErrs []error
	retries []retryCall
}

type retryCall struct {
	id    string
	delay time.Duration
	ready time.Time
}

func (r *recorder) Settle(ctx context.Context, s keyspace.Shard, w protocol.Caller, lane protocol.Lane, id string, ops []protocol.Op) ([]protocol.Settled, error) {
	res, err := r.Broker.Settle(ctx, s, w, lane, id, ops)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, op := range ops {
		switch {
		case res == nil && op.Kind == protocol.OpAck:
			r.ackErrs = append(r.ackErrs, err)
		case res == nil:
		case op.Kind == protocol.OpAck:
			r.ackErrs = append(r.ackErrs, res[i].Err)
		case op.Kind == protocol.OpRetry && res[i].Err == nil:
			r.retries = append(r.retries, retryCall{op.Lease.ID, op.Delay, res[i].At})
		}
	}
	return res, err
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
