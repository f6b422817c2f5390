package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

var errInjected = errors.New("injected: connection reset")

// flaky fails the first failAcks Settle calls that ack and the first
// failRetries that retry with errInjected, as a dropped connection would.
type flaky struct {
	protocol.Broker
	failAcks, failRetries atomic.Int32
	ackCalls, retryCalls  atomic.Int32
	claimOnce             bool        // hand out jobs in one claim only
	claimed               atomic.Bool // a claim handed out jobs
}

func (f *flaky) Claim(ctx context.Context, s keyspace.Shard, w protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	if f.claimOnce && f.claimed.Load() {
		return protocol.ClaimResult{}, nil
	}
	res, err := f.Broker.Claim(ctx, s, w, id, n, lease)
	if len(res.Jobs) > 0 {
		f.claimed.Store(true)
	}
	return res, err
}

func (f *flaky) Settle(ctx context.Context, s keyspace.Shard, w protocol.Caller, lane protocol.Lane, id string, ops []protocol.Op) ([]protocol.Settled, error) {
	for _, op := range ops {
		switch op.Kind {
		case protocol.OpAck:
			f.ackCalls.Add(1)
			if f.failAcks.Add(-1) >= 0 {
				return nil, errInjected
			}
		case protocol.OpRetry:
			f.retryCalls.Add(1)
			if f.failRetries.Add(-1) >= 0 {
				return nil, errInjected
			}
		}
	}
	return f.Broker.Settle(ctx, s, w, lane, id, ops)
}

func TestRedisErrorsOnAckAndRetryAreRetried(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var calls atomic.Int32
	job.New[payload]("wobbly").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if calls.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	f := &flaky{}
	f.failAcks.Store(3)
	f.failRetries.Store(2)
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { f.Broker = p; return f })
	start(t, cfg)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "w", Type: "wobbly", Payload: []byte(`{}`), MaxRetries: 3,
		Backoff: &job.Backoff{Initial: time.Millisecond, Multiplier: 1, Max: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "job acked", func() bool {
		ok, _ := tb.rdb.HExists(tb.ctx, tb.key("default", "jobs"), "w").Result()
		return !ok && calls.Load() == 2
	})
	if f.retryCalls.Load() != 3 || f.ackCalls.Load() != 4 {
		t.Fatalf("retry calls %d (want 2 failed + 1), ack calls %d (want 3 failed + 1)", f.retryCalls.Load(), f.ackCalls.Load())
	}
}

func TestUnackableJobIsRedeliveredAfterLease(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var calls atomic.Int32
	job.New[payload]("unackable").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		calls.Add(1)
		return nil
	})
	// The first worker can never ack: its Redis link for acks is down for
	// longer than the lease. Its job must come back, not vanish.
	broken := &flaky{}
	broken.failAcks.Store(1 << 30)
	broken.claimOnce = true // the redelivery must go to the healthy worker
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { broken.Broker = p; return broken })
	cfg.Concurrency = 1
	cfg.Lease = 300 * time.Millisecond
	cfg.ReapInterval = -1
	stopBroken := start(t, cfg)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "u", Type: "unackable", Payload: []byte(`{}`), MaxRetries: 3}); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "first delivery", func() bool { return calls.Load() == 1 })

	healthy := tb.config(t)
	healthy.Lease = 300 * time.Millisecond
	healthy.ReapInterval = 50 * time.Millisecond
	start(t, healthy)
	redistest.WaitFor(t, 10*time.Second, "redelivered and acked", func() bool {
		ok, _ := tb.rdb.HExists(tb.ctx, tb.key("default", "jobs"), "u").Result()
		return !ok && calls.Load() >= 2
	})
	stopBroken()
	tb.queueKeysEmpty(t, "default")
}
