package worker_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/faultproxy"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// logBuffer collects a worker's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// attemptOutcomes records the outcome of every attempt, by job id.
type attemptOutcomes struct {
	mu  sync.Mutex
	got map[string][]job.Outcome
}

func (o *attemptOutcomes) middleware() job.Middleware {
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			job.OnResult(ctx, func(r job.Result) {
				o.mu.Lock()
				defer o.mu.Unlock()
				if o.got == nil {
					o.got = map[string][]job.Outcome{}
				}
				o.got[m.ID] = append(o.got[m.ID], r.Outcome)
			})
			return next.Handle(ctx, m)
		})
	}
}

func (o *attemptOutcomes) of(id string) []job.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]job.Outcome(nil), o.got[id]...)
}

// lossyWorker is a worker whose Redis client goes through a fault proxy to
// a server of its own; producers and checks use a direct client.
type lossyWorker struct {
	ctx    context.Context
	b      *broker.Broker // direct
	reg    *job.Registry
	proxy  *faultproxy.Proxy
	cfg    worker.Options
	logs   *logBuffer
	result *attemptOutcomes
	runs   sync.Map // job id -> *atomic.Int32
}

func newLossyWorker(t *testing.T, retries bool, fail func(id string, attempt int) error) *lossyWorker {
	t.Helper()
	srv := redistest.Start(t)
	direct := srv.Client(t)
	p := faultproxy.Start(t, srv.Addr())
	opts := &redis.Options{Addr: p.Addr()}
	if !retries {
		opts.MaxRetries = -1
	}
	viaProxy := redis.NewClient(opts)
	t.Cleanup(func() { _ = viaProxy.Close() })
	lw := &lossyWorker{ctx: context.Background(), b: testkit.NewBroker(t, direct, broker.Options{}), reg: job.NewRegistry(),
		proxy: p, logs: &logBuffer{}, result: &attemptOutcomes{}}
	job.New[payload]("edge", job.MaxRetries(0)).Handle(lw.reg, func(ctx context.Context, j *job.Job[payload]) error {
		n, _ := lw.runs.LoadOrStore(j.ID, new(atomic.Int32))
		attempt := int(n.(*atomic.Int32).Add(1))
		if fail != nil {
			return fail(j.ID, attempt)
		}
		return nil
	})
	logger := zerolog.New(zerolog.MultiLevelWriter(lw.logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	lw.cfg = worker.Options{
		Broker:       testkit.NewBroker(t, viaProxy, broker.Options{}),
		Registry:     lw.reg,
		Lease:        time.Second,
		ReapInterval: 100 * time.Millisecond,
		MaxIdle:      100 * time.Millisecond,
		Logger:       &logger,
	}
	return lw
}

func (lw *lossyWorker) start(t *testing.T) (stop func()) {
	return testkit.StartWorker(t, lw.cfg, lw.result.middleware())
}

func (lw *lossyWorker) enqueue(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := job.New[payload]("edge", job.MaxRetries(0)).Enqueue(lw.ctx, lw.b, payload{}, job.ID(id)); err != nil {
			t.Fatal(err)
		}
	}
}

func (lw *lossyWorker) ran(id string) int {
	if n, ok := lw.runs.Load(id); ok {
		return int(n.(*atomic.Int32).Load())
	}
	return 0
}

// settledAfterLease waits out a lease and a few reaper rounds, then checks
// that every job ran once, succeeded and left nothing behind: none was
// reaped, dead-lettered or handled again.
func (lw *lossyWorker) settledAfterLease(t *testing.T, ids ...string) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, "jobs handled", func() bool {
		for _, id := range ids {
			if len(lw.result.of(id)) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(lw.cfg.Lease + 300*time.Millisecond)
	for _, id := range ids {
		if n := lw.ran(id); n != 1 {
			t.Errorf("job %s ran %d times, want 1", id, n)
		}
		if got := lw.result.of(id); len(got) != 1 || got[0] != job.OutcomeSuccess {
			t.Errorf("job %s attemptOutcomes %v, want one success", id, got)
		}
	}
	if st, err := testkit.OneStats(lw.b.Stats(lw.ctx, naming.DefaultQueue)); err != nil || st.Scheduled+st.Processing+st.Dead != 0 {
		t.Errorf("stats %+v, %v; want the queue empty, nothing dead", st, err)
	}
	if strings.Contains(lw.logs.String(), "lease lost") || strings.Contains(lw.logs.String(), "lease expired") {
		t.Errorf("the worker logged a lost or expired lease:\n%s", lw.logs.String())
	}
}

// A claim whose reply is lost, with or without go-redis's own resend: the
// worker gets its jobs (the claim is replayed by its id) and runs them,
// no attempt is spent on them, and jobs with no retries left do not end in
// the dead letters unrun.
func TestLostClaimReplyRunsTheJobs(t *testing.T) {
	t.Parallel()
	for _, retries := range []bool{true, false} {
		t.Run("retries "+strconv.FormatBool(retries), func(t *testing.T) {
			t.Parallel()
			lw := newLossyWorker(t, retries, nil)
			lw.enqueue(t, "a", "b")
			lost := lw.proxy.DropReply(faultproxy.Command("evalsha", testkit.Key(t, lw.b, naming.DefaultQueue, "seq")))
			lw.start(t)
			<-lost
			lw.settledAfterLease(t, "a", "b")
		})
	}
}

// A worker that stops while a claim's reply is lost gives the jobs back:
// another worker runs them at their first attempt.
func TestLostClaimReplyAtShutdownReleasesTheJobs(t *testing.T) {
	t.Parallel()
	lw := newLossyWorker(t, false, nil)
	lw.enqueue(t, "a")
	lost := lw.proxy.DropReply(faultproxy.Command("evalsha", testkit.Key(t, lw.b, naming.DefaultQueue, "seq")))
	stop := lw.start(t)
	<-lost
	stop()
	if st, err := testkit.OneStats(lw.b.Stats(lw.ctx, naming.DefaultQueue)); err != nil || st.Scheduled != 1 || st.Processing != 0 {
		t.Fatalf("after the stop: %+v, %v; want the job back in the schedule", st, err)
	}
	lw.start(t)
	lw.settledAfterLease(t, "a")
	if got := lw.result.of("a"); len(got) != 1 {
		t.Fatalf("attemptOutcomes %v", got)
	}
}

// A lost reply to the call that records attemptOutcomes (here: acks) is replayed:
// the worker reports success, not a lost lease, and nothing runs twice.
func TestLostSettleReplyIsRecordedOnce(t *testing.T) {
	t.Parallel()
	for _, retries := range []bool{true, false} {
		t.Run("retries "+strconv.FormatBool(retries), func(t *testing.T) {
			t.Parallel()
			lw := newLossyWorker(t, retries, nil)
			lw.enqueue(t, "a")
			lost := lw.proxy.DropReply(faultproxy.Command("evalsha", testkit.Key(t, lw.b, naming.DefaultQueue, "dead")))
			lw.start(t)
			<-lost
			lw.settledAfterLease(t, "a")
		})
	}
}

// In durable mode without a replica, every claim and outcome falls short of
// its WAIT: the claimed jobs still run (not left to their lease, no attempt
// lost) and their attemptOutcomes stand on the master.
func TestDurableWithoutReplicaStillRunsJobs(t *testing.T) {
	t.Parallel()
	lw := newLossyWorker(t, true, nil)
	rdb := lw.cfg.Broker.Client()
	lw.cfg.Broker = testkit.NewBroker(t, rdb, broker.Options{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	lw.enqueue(t, "a", "b")
	lw.start(t)
	redistest.WaitFor(t, 5*time.Second, "jobs handled", func() bool { return len(lw.result.of("a")) == 1 && len(lw.result.of("b")) == 1 })
	time.Sleep(lw.cfg.Lease + 300*time.Millisecond)
	for _, id := range []string{"a", "b"} {
		if n := lw.ran(id); n != 1 {
			t.Errorf("job %s ran %d times, want 1", id, n)
		}
	}
	if st, err := testkit.OneStats(lw.b.Stats(lw.ctx, naming.DefaultQueue)); err != nil || st.Scheduled+st.Processing+st.Dead != 0 {
		t.Errorf("stats %+v, %v; want the queue empty", st, err)
	}
}

// A retry stores only what the producer set: a job without a timeout,
// retried under a worker whose default is 7s, keeps no timeout, so a later
// worker's default applies to it.
func TestRetryKeepsTheProducersTimeout(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	job.New[payload]("flaky").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if j.Timeout != 7*time.Second {
			t.Errorf("handler's message has timeout %s, want the worker's 7s", j.Timeout)
		}
		return errors.New("not yet")
	})
	cfg := tb.config(t)
	cfg.Timeout = 7 * time.Second
	stop := start(t, cfg)
	env, err := job.New[payload]("flaky").Enqueue(tb.ctx, tb.b, payload{}, job.ID("t"),
		job.WithBackoff(retry.Exponential{Initial: time.Hour, Multiplier: 1, Max: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "retried", func() bool {
		j, err := tb.b.Job(tb.ctx, env.Queue, "t")
		return err == nil && j.State == job.StateScheduled && j.Envelope.LastError != ""
	})
	stop()
	j, err := tb.b.Job(tb.ctx, env.Queue, "t")
	if err != nil {
		t.Fatal(err)
	}
	if j.Envelope.Timeout != 0 {
		t.Fatalf("the retried job is stored with timeout %s, want none", j.Envelope.Timeout)
	}
}

// The heartbeat warns only of leases really lost: a job that finished
// between its snapshot of the running jobs and the extend is no loss.
func TestHeartbeatWarnsOnlyOfLostLeases(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var handled atomic.Int32
	job.New[payload]("quick").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		time.Sleep(30 * time.Millisecond) // long enough for heartbeats to see it run
		handled.Add(1)
		return nil
	})
	logs := &logBuffer{}
	logger := zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	cfg := tb.config(t)
	cfg.Logger = &logger
	cfg.Lease, cfg.HeartbeatInterval = time.Second, 20*time.Millisecond
	var extends atomic.Int32
	cfg = tb.wrapped(t, cfg, func(p protocol.Broker) protocol.Broker {
		return &lateExtend{Broker: p, jobs: tb.key(naming.DefaultQueue, "jobs"), rdb: tb.rdb, extends: &extends}
	})
	start(t, cfg)
	for i := range 20 {
		if _, err := job.New[payload]("quick").Enqueue(tb.ctx, tb.b, payload{}, job.ID("q"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "jobs handled and late extends sent", func() bool {
		return handled.Load() == 20 && extends.Load() > 0
	})
	if strings.Contains(logs.String(), "lease lost") {
		t.Fatalf("the heartbeat reported lost leases of finished jobs:\n%s", logs.String())
	}
}

// lateExtend sends each Extend only once the jobs of its leases were acked:
// the heartbeat's snapshot is then stale, as when jobs finish during a
// heartbeat.
type lateExtend struct {
	protocol.Broker
	jobs    string
	rdb     redis.UniversalClient
	extends *atomic.Int32
}

func (l *lateExtend) Extend(ctx context.Context, lease time.Duration, leases ...protocol.Lease) error {
	deadline := time.Now().Add(2 * time.Second)
	for _, ls := range leases {
		for l.rdb.HExists(ctx, l.jobs, ls.ID).Val() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	err := l.Broker.Extend(ctx, lease, leases...)
	var be *job.BatchError
	if errors.As(err, &be) {
		l.extends.Add(1) // an extend that found leases gone
	}
	return err
}
