package faulttest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// trimFlow runs the dead-letter trims through a broker on rdb with options
// o and a dead-letter cap of 2: five jobs die, the three records trimmed
// are counted and handed to the worker's OnDeadTrimmed hook, and an
// operator's trim by age counts as well. Under an ACL user it shows that
// the scripts and the hook's take of the kept records send only what the
// recipe allows.
func trimFlow(t *testing.T, rdb redis.UniversalClient, o broker.Options) {
	t.Helper()
	ctx := context.Background()
	const q = "trims"
	o.DeadCap = 2
	b, err := broker.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	typ := job.New[crashArgs]("secure.trim", job.Queue(q))
	reg := job.NewRegistry()
	typ.Handle(reg, func(context.Context, *job.Job[crashArgs]) error { return retry.Permanent(errors.New("refused")) })
	var handed atomic.Int64
	stop := runWorker(t, worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: q}}, Lease: 5 * time.Second, MaxIdle: 100 * time.Millisecond,
		OnDeadTrimmed: func(_ context.Context, r *job.TrimmedRecord) {
			if r.Trim == naming.TrimCap && r.Envelope != nil {
				handed.Add(1)
			}
		}})
	defer stop()
	for i := range 5 {
		if _, err := typ.Enqueue(ctx, b, crashArgs{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 20*time.Second, "three trimmed records handed to the hook", func() bool { return handed.Load() == 3 })
	st, err := testkit.OneStats(b.Stats(ctx, q))
	if err != nil || st.Dead != 2 || st.DeadTrimmedCap != 3 {
		t.Fatalf("stats %+v (%v): want 2 dead, 3 trimmed by the cap", st, err)
	}
	aged, err := broker.New(rdb, broker.Options{Namespace: o.Namespace, Functions: o.Functions, DeadMaxAge: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var dropped int64
	redistest.WaitFor(t, 10*time.Second, "both records a millisecond old trimmed by age", func() bool {
		n, err := deadletter.New(aged).Trim(ctx, q)
		if err != nil {
			t.Fatalf("trim by age: %v", err)
		}
		dropped += n
		return dropped == 2
	})
	if st, err := testkit.OneStats(b.Stats(ctx, q)); err != nil || st.DeadTrimmedAge != 2 {
		t.Fatalf("stats %+v (%v): want 2 trimmed by age", st, err)
	}
}
