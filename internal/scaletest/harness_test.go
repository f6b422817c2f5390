package scaletest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// scaleEnv must be 1 for these tests to run: each starts a cluster or
// Sentinel setup and moves tens of thousands of jobs, which .ci/run does
// once, without the race detector.
const scaleEnv = "DELAYQ_TEST_SCALE"

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; during a failover that is noise.
	redis.SetLogger(quiet{})
	redistest.Main(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func needScale(t testing.TB) {
	t.Helper()
	if os.Getenv(scaleEnv) != "1" {
		t.Skipf("set %s=1 to run the cluster scale and failover tests", scaleEnv)
	}
}

// noop is the job type of these tests; a high retry budget, so that a job
// whose lease expires several times during a failover is not dead-lettered.
var noop = job.New[struct{}]("scale.noop", job.MaxRetries(100))

// ledger records what producers were told and what handlers saw.
type ledger struct {
	mu       sync.Mutex
	accepted map[string]bool // Enqueue returned nil, or ErrDuplicate on a retry
	handled  map[string]int  // handler calls per id
	retried  atomic.Int64    // enqueue calls that failed and were repeated
}

func newLedger() *ledger {
	return &ledger{accepted: map[string]bool{}, handled: map[string]int{}}
}

func (l *ledger) counts() (accepted, handled int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted), len(l.handled)
}

// result is what a run lost and duplicated.
type result struct {
	accepted, handled, lost, duplicated, redeliveries, dead, stuck int
	enqueueRetries                                                 int64
	stats                                                          job.QueueStats
}

func (r result) String() string {
	return fmt.Sprintf("accepted %d, handled %d, lost %d (still stored: %d), duplicated %d (%d extra deliveries), dead-lettered %d, enqueue calls repeated %d; left: %d scheduled, %d processing",
		r.accepted, r.handled, r.lost, r.stuck, r.duplicated, r.redeliveries, r.dead, r.enqueueRetries, r.stats.Scheduled, r.stats.Processing)
}

// tally compares the ledger with what is left in the queue.
func (l *ledger) tally(ctx context.Context, t *testing.T, b *broker.Broker, queue string) result {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := result{accepted: len(l.accepted), handled: len(l.handled), enqueueRetries: l.retried.Load()}
	for id := range l.accepted {
		if l.handled[id] == 0 {
			r.lost++
		}
	}
	for _, n := range l.handled {
		if n > 1 {
			r.duplicated++
			r.redeliveries += n - 1
		}
	}
	st, err := testkit.OneStats(b.Stats(ctx, queue))
	if err != nil {
		t.Fatal(err)
	}
	r.dead = int(st.Dead)
	r.stats = st
	// A lost job still stored somewhere is stuck, not lost.
	shards, err := protocol.Admin(b).Shards(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	for id := range l.accepted {
		if l.handled[id] != 0 {
			continue
		}
		for _, s := range shards {
			if ok, _ := b.Client().HExists(ctx, b.Namespace()+":{"+s.Name+"}:jobs", id).Result(); ok {
				r.stuck++
			}
		}
	}
	return r
}

// produce enqueues ids in batches through b, resending a call whose outcome
// is open and repeating the jobs of a batch that failed (with the same ids)
// until they are accepted or ctx ends.
func (l *ledger) produce(ctx context.Context, b *broker.Broker, queue string, ids []string, batch int, pace time.Duration) error {
	for start := 0; start < len(ids); start += batch {
		pending := ids[start:min(start+batch, len(ids))]
		for len(pending) > 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			envs := make([]*job.Envelope, len(pending))
			for i, id := range pending {
				e, err := noop.Envelope(struct{}{}, job.ID(id), job.Queue(queue))
				if err != nil {
					return err
				}
				envs[i] = e
			}
			err := b.Enqueue(ctx, envs...)
			// A call that may have run, or that the replicas did not
			// confirm, is sent again as it was (docs/guarantees.md, "What
			// an answer means"), so that a job it stored that ran since is
			// not stored again.
			for (errors.Is(err, broker.ErrOutcomeUnknown) || errors.Is(err, broker.ErrNotReplicated)) && ctx.Err() == nil {
				l.retried.Add(1)
				time.Sleep(50 * time.Millisecond)
				err = broker.Resend(ctx, err)
			}
			errs := make([]error, len(pending))
			var be *job.BatchError
			switch {
			case err == nil:
			case len(pending) > 1 && errors.As(err, &be):
				copy(errs, be.Errs)
			default:
				for i := range errs {
					errs[i] = err
				}
			}
			var again []string
			l.mu.Lock()
			for i, id := range pending {
				// A duplicate is a job an earlier, failed call stored.
				if errs[i] == nil || errors.Is(errs[i], broker.ErrDuplicate) {
					l.accepted[id] = true
				} else {
					again = append(again, id)
				}
			}
			l.mu.Unlock()
			if pending = again; len(pending) > 0 {
				l.retried.Add(1)
				time.Sleep(50 * time.Millisecond)
			}
		}
		time.Sleep(pace)
	}
	return nil
}

// work runs a worker on queue that records every delivery, until the
// returned stop is called.
func (l *ledger) work(t testing.TB, b *broker.Broker, queue string, concurrency int, lease time.Duration) (stop func()) {
	t.Helper()
	reg := job.NewRegistry()
	noop.Handle(reg, func(ctx context.Context, j *job.Job[struct{}]) error {
		l.mu.Lock()
		l.handled[j.ID]++
		l.mu.Unlock()
		return nil
	})
	logger := zerolog.Nop()
	return testkit.StartWorker(t, worker.Options{
		Broker:          b,
		Registry:        reg,
		Queues:          []worker.Queue{{Name: queue}},
		Concurrency:     concurrency,
		Lease:           lease,
		MaxIdle:         time.Second,
		ShutdownTimeout: 5 * time.Second,
		Logger:          &logger,
	})
}

// settle waits until every accepted job was handled, or until the handled
// count has not moved for quiet, or until timeout.
func (l *ledger) settle(quiet, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	last, since := -1, time.Now()
	for time.Now().Before(deadline) {
		l.mu.Lock()
		done := true
		for id := range l.accepted {
			if l.handled[id] == 0 {
				done = false
				break
			}
		}
		n := len(l.handled)
		l.mu.Unlock()
		if done {
			return
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > quiet {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jobIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	return ids
}

// newBroker returns a broker over its own client, as a separate process
// would have.
func newBroker(t testing.TB, rdb redis.UniversalClient, ns string, durable bool) *broker.Broker {
	t.Helper()
	opts := broker.Options{Namespace: ns}
	if durable {
		opts.WaitReplicas = 1
	}
	b, err := broker.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
