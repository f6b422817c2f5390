package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

type payload struct {
	N int `json:"n"`
}

func TestDrainExactlyOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const total = 20_000
	typ := job.New[payload]("drain")
	var handled [total]atomic.Int32
	var done atomic.Int32
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if handled[j.Args.N].Add(1) == 1 {
			done.Add(1)
		}
		return nil
	})
	args := make([]payload, total)
	for i := range args {
		args[i] = payload{N: i}
	}
	for i := 0; i < total; i += 1000 {
		if _, err := typ.EnqueueItems(tb.ctx, tb.b, testkit.Items(args[i:i+1000])); err != nil {
			t.Fatal(err)
		}
	}
	var stops []func()
	for range 8 {
		cfg := tb.config(t)
		cfg.Concurrency = 16
		stops = append(stops, start(t, cfg))
	}
	redistest.WaitFor(t, 60*time.Second, "all jobs handled", func() bool { return done.Load() == total })
	for _, stop := range stops {
		stop()
	}
	for i := range handled {
		if n := handled[i].Load(); n != 1 {
			t.Fatalf("job %d handled %d times", i, n)
		}
	}
	tb.queueKeysEmpty(t, naming.DefaultQueue)
}

func TestExpiredLeaseIsRedeliveredAndStaleAckFenced(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("slow")
	var calls atomic.Int32
	release := make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if calls.Add(1) == 1 {
			<-release // the first worker hangs past its lease
		}
		return nil
	})
	rec := &recorder{}
	slow := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { rec.Broker = p; return rec })
	slow.Concurrency = 1 // busy with the hung job: the redelivery must go elsewhere
	slow.Lease = 300 * time.Millisecond
	slow.HeartbeatInterval = -1
	slow.ReapInterval = -1
	stopSlow := start(t, slow)
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID("j1")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "first delivery", func() bool { return calls.Load() == 1 })

	other := tb.config(t)
	other.Lease = 300 * time.Millisecond
	other.ReapInterval = 50 * time.Millisecond
	start(t, other)
	redistest.WaitFor(t, 5*time.Second, "redelivery to another worker", func() bool { return calls.Load() == 2 })
	redistest.WaitFor(t, 5*time.Second, "second worker's ack", func() bool {
		n, _ := tb.rdb.HExists(tb.ctx, tb.key("default", "jobs"), "j1").Result()
		return !n
	})

	close(release) // the first worker finishes and tries to ack
	stopSlow()
	errs := rec.ackErrors()
	if len(errs) != 1 || !errors.Is(errs[0], broker.ErrLeaseLost) {
		t.Fatalf("stale ack errors %v, want one ErrLeaseLost", errs)
	}
	tb.queueKeysEmpty(t, "default")
	if calls.Load() != 2 {
		t.Fatalf("handled %d times, want 2", calls.Load())
	}
}

func TestRetryBackoffThenDeadThenRedrive(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("flaky", job.MaxRetries(3))
	var fail atomic.Bool
	fail.Store(true)
	var attempts []int
	var mu sync.Mutex
	var succeeded atomic.Bool
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		attempts = append(attempts, j.Attempt)
		mu.Unlock()
		if j.ClaimedAt.Before(j.ReadyAt) {
			t.Errorf("attempt %d claimed at %v before its ready time %v", j.Attempt, j.ClaimedAt, j.ReadyAt)
		}
		if fail.Load() {
			return fmt.Errorf("provider down (attempt %d)", j.Attempt)
		}
		succeeded.Store(true)
		return nil
	})
	rec := &recorder{}
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { rec.Broker = p; return rec })
	start(t, cfg)
	bo := retry.Exponential{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second, Jitter: 0.2}
	env, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 7}, job.ID("flaky-1"), job.WithBackoff(bo))
	if err != nil {
		t.Fatal(err)
	}
	in := deadletter.New(tb.b)
	var rec1 *job.DeadRecord
	redistest.WaitFor(t, 10*time.Second, "dead record", func() bool {
		rec1, err = in.Get(tb.ctx, "default", "flaky-1")
		return err == nil
	})
	calls := rec.retryCalls()
	if len(calls) != 3 {
		t.Fatalf("%d retries, want 3", len(calls))
	}
	for i, c := range calls {
		base := 100 * time.Millisecond << i
		if c.delay < base*8/10 || c.delay > base*12/10 {
			t.Errorf("retry %d delay %v, want %v ±20%%", i+1, c.delay, base)
		}
	}
	if rec1.Attempts != 4 || rec1.Error != "provider down (attempt 4)" || rec1.Type != "flaky" {
		t.Fatalf("dead record %+v", rec1)
	}
	if rec1.DiedAt.Before(env.ReadyAt) || rec1.Envelope == nil || !rec1.Envelope.CreatedAt.Equal(env.CreatedAt.Truncate(time.Millisecond)) {
		t.Fatalf("dead record timestamps: died %v ready %v created %v/%v", rec1.DiedAt, env.ReadyAt, rec1.Envelope.CreatedAt, env.CreatedAt)
	}

	fail.Store(false)
	if err := in.Redrive(tb.ctx, "default", 0, "flaky-1"); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "success after redrive", succeeded.Load)
	mu.Lock()
	got := fmt.Sprint(attempts)
	mu.Unlock()
	if got != "[1 2 3 4 1]" {
		t.Fatalf("attempts %s, want [1 2 3 4 1] (reset by redrive)", got)
	}
	if _, err := in.Get(tb.ctx, "default", "flaky-1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("dead record still there after redrive: %v", err)
	}
}

func TestPermanentPanicAndAfter(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var permanentCalls, afterCalls atomic.Int32
	var afterMu sync.Mutex
	var afterTimes []time.Time
	job.New[payload]("permanent").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		permanentCalls.Add(1)
		return retry.Permanent(errors.New("card declined"))
	})
	job.New[payload]("panics", job.MaxRetries(0)).Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		var m map[string]int
		m["boom"]++ // nil map write
		return nil
	})
	job.New[payload]("snooze").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		afterMu.Lock()
		afterTimes = append(afterTimes, time.Now())
		afterMu.Unlock()
		afterCalls.Add(1)
		if j.Attempt == 1 {
			return retry.After(400*time.Millisecond, errors.New("rate limited"))
		}
		return nil
	})
	start(t, tb.config(t))
	for _, name := range []string{"permanent", "panics", "snooze"} {
		if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: name, Type: name, Payload: []byte(`{}`), MaxRetries: 5}); err != nil {
			t.Fatal(err)
		}
	}
	in := deadletter.New(tb.b)
	get := func(id string) *job.DeadRecord {
		var r *job.DeadRecord
		redistest.WaitFor(t, 5*time.Second, "dead record "+id, func() bool {
			var err error
			r, err = in.Get(tb.ctx, "default", id)
			return err == nil
		})
		return r
	}
	if r := get("permanent"); r.Attempts != 1 || r.Error != "card declined" || permanentCalls.Load() != 1 {
		t.Fatalf("permanent: %+v after %d calls", r, permanentCalls.Load())
	}
	// MaxRetries in the envelope (5) wins over the type's default.
	redistest.WaitFor(t, 5*time.Second, "snooze retried", func() bool { return afterCalls.Load() == 2 })
	afterMu.Lock()
	gap := afterTimes[1].Sub(afterTimes[0])
	afterMu.Unlock()
	if gap < 400*time.Millisecond {
		t.Fatalf("retry.After(400ms): next attempt after only %v", gap)
	}
	tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "panics-0", Type: "panics", Payload: []byte(`{}`)})
	r := get("panics-0")
	if !strings.Contains(r.Error, "panic: assignment to entry in nil map") || !strings.Contains(r.Error, "worker_test.go") {
		t.Fatalf("panic record error lacks the panic or its stack:\n%s", r.Error)
	}
}

func TestCancelledJobNeverRuns(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("order.cancel_unpaid")
	ran := make(chan string, 10)
	block := make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		ran <- j.ID
		if j.ID == "busy" {
			<-block
		}
		return nil
	})
	start(t, tb.config(t))
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID("paid"), job.In(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID("busy")); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "default", "paid"); err != nil {
		t.Fatal(err)
	}
	if id := <-ran; id != "busy" {
		t.Fatalf("%s ran", id)
	}
	if c, err := tb.b.Cancel(tb.ctx, "default", "busy"); err != nil || !c.Running {
		t.Fatalf("cancel of a running job: %+v, %v; want it asked to stop", c, err)
	}
	close(block)
	select {
	case id := <-ran:
		t.Fatalf("%s ran after cancel", id)
	case <-time.After(time.Second):
	}
}

func TestGracefulShutdownReleasesUnfinishedJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("shutdown")
	type delivery struct {
		id      string
		attempt int
		worker  string
	}
	deliveries := make(chan delivery, 100)
	handler := func(name string) func(ctx context.Context, j *job.Job[payload]) error {
		return func(ctx context.Context, j *job.Job[payload]) error {
			deliveries <- delivery{j.ID, j.Attempt, name}
			if j.Args.N == 0 {
				return nil // quick
			}
			if name == "first" && j.Args.N == 1 {
				time.Sleep(200 * time.Millisecond) // finishes within the deadline
				return nil
			}
			if name == "first" {
				<-ctx.Done() // outlives the deadline
				return ctx.Err()
			}
			return nil
		}
	}
	reg1 := job.NewRegistry()
	typ.Handle(reg1, handler("first"))
	cfg := tb.config(t)
	cfg.Registry = reg1
	cfg.ShutdownTimeout = 500 * time.Millisecond
	stop := start(t, cfg)
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 1}, job.ID("finishes")); err != nil {
		t.Fatal(err)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 2}, job.ID("stuck")); err != nil {
		t.Fatal(err)
	}
	<-deliveries
	<-deliveries
	stop()
	if ok, _ := tb.rdb.HExists(tb.ctx, tb.key("default", "jobs"), "finishes").Result(); ok {
		t.Fatal("the job that finished within the deadline was not acked")
	}
	if n, _ := tb.rdb.ZCard(tb.ctx, tb.key("default", "processing")).Result(); n != 0 {
		t.Fatalf("%d jobs still leased after shutdown", n)
	}

	reg2 := job.NewRegistry()
	typ.Handle(reg2, handler("second"))
	cfg2 := tb.config(t)
	cfg2.Registry = reg2
	start(t, cfg2)
	select {
	case d := <-deliveries:
		if d.id != "stuck" || d.worker != "second" || d.attempt != 1 {
			t.Fatalf("after release: %+v, want stuck on the second worker at attempt 1", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("released job was not handled by the second worker")
	}
}

func TestStartsOnTimeNeverEarly(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("timed")
	type start struct {
		ready, at time.Time
	}
	var mu sync.Mutex
	starts := map[int]start{}
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		now := time.Now()
		mu.Lock()
		starts[j.Args.N] = start{j.ReadyAt, now}
		mu.Unlock()
		return nil
	})
	cfg := tb.config(t)
	cfg.Concurrency = 50
	cfg.MaxIdle = 5 * time.Second // wake-ups, not polling, must bring the jobs on time
	startWorker := func() { _ = startFn(t, cfg) }
	startWorker()
	time.Sleep(200 * time.Millisecond) // the worker is idle and asleep

	// The idle worker must start a job due in 300ms within 50ms of its ready
	// time. A busy machine can delay one wake-up beyond that, so each of up
	// to three jobs gets its chance; starting early fails at once.
	var lates []time.Duration
	for try := 1; try <= 3; try++ {
		key := -try
		if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: key}, job.In(300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 5*time.Second, "idle-start job", func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := starts[key]
			return ok
		})
		mu.Lock()
		s := starts[key]
		delete(starts, key)
		mu.Unlock()
		late := s.at.Sub(s.ready)
		if late < -time.Millisecond {
			t.Fatalf("job due in 300ms started %v before its ready time", -late)
		}
		lates = append(lates, late)
		if late <= 50*time.Millisecond {
			break
		}
	}
	if best := slices.Min(lates); best > 50*time.Millisecond {
		t.Fatalf("jobs due in 300ms started %v after their ready time, want one within 50ms", lates)
	}

	const n = 1000
	for i := range n {
		d := time.Duration(rand.Int64N(int64(2 * time.Second)))
		if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: i}, job.In(d)); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 30*time.Second, "all timed jobs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) == n
	})
	mu.Lock()
	defer mu.Unlock()
	var early int
	var worst time.Duration
	for _, s := range starts {
		late := s.at.Sub(s.ready)
		if late < -time.Millisecond {
			early++
		}
		worst = max(worst, late)
	}
	if early > 0 {
		t.Fatalf("%d of %d jobs started more than 1ms before their ready time", early, n)
	}
	t.Logf("worst lateness over %d jobs: %v", n, worst)
}

var startFn = start

func TestBadPayloadAndUnknownType(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	job.New[payload]("strict").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error { return nil })
	cfg := tb.config(t)
	cfg.Retry = retry.Constant(10 * time.Millisecond)
	start(t, cfg)
	for _, e := range []*job.Envelope{
		{ID: "bad-payload", Type: "strict", Payload: []byte(`{"n":"not a number"}`), MaxRetries: 5},
		{ID: "no-handler", Type: "nobody.handles", Payload: []byte(`{}`), MaxRetries: 2},
	} {
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	in := deadletter.New(tb.b)
	for _, tc := range []struct {
		id       string
		attempts int
		want     []string
	}{
		{"bad-payload", 1, []string{`payload of type "strict" does not decode into worker_test.payload`, "cannot unmarshal string"}},
		{"no-handler", 3, []string{`no handler registered for type "nobody.handles"`}},
	} {
		var r *job.DeadRecord
		redistest.WaitFor(t, 5*time.Second, "dead "+tc.id, func() bool {
			var err error
			r, err = in.Get(tb.ctx, "default", tc.id)
			return err == nil
		})
		for _, w := range tc.want {
			if !strings.Contains(r.Error, w) {
				t.Errorf("%s: error %q lacks %q", tc.id, r.Error, w)
			}
		}
		if r.Attempts != tc.attempts {
			t.Errorf("%s: %d attempts, want %d", tc.id, r.Attempts, tc.attempts)
		}
	}
}

func TestCorruptEnvelopeIsDeadLettered(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var handled atomic.Int32
	job.New[payload]("fine").Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		handled.Add(1)
		return nil
	})
	start(t, tb.config(t))
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "garbage", Type: "fine", Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	tb.rdb.HSet(tb.ctx, tb.key("default", "jobs"), "garbage", "\xde\xad\xbe\xef")
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "after", Type: "fine", Payload: []byte(`{}`), Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	in := deadletter.New(tb.b)
	redistest.WaitFor(t, 5*time.Second, "corrupt job dead-lettered, next job handled", func() bool {
		r, err := in.Get(tb.ctx, "default", "garbage")
		return err == nil && strings.Contains(r.Error, "corrupt envelope") && string(r.Body) == "\xde\xad\xbe\xef" && handled.Load() == 1
	})
}

// TestUnreadableTypeIsDeadLetteredUnrun: a body stored before the header
// layout whose payload the claim script cannot decode, in a queue with a
// type control, is dead-lettered as corrupt without running: its type's
// controls could not be applied. Its dead record names its type (Go
// decodes it) and keeps its body; other jobs run.
func TestUnreadableTypeIsDeadLetteredUnrun(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var handled sync.Map
	job.New[json.RawMessage]("capped").Handle(tb.reg, func(ctx context.Context, j *job.Job[json.RawMessage]) error {
		handled.Store(j.ID, true)
		return nil
	})
	if err := tb.b.SetConcurrency(tb.ctx, "default", "capped", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "deep", Type: "capped", Payload: []byte(`{}`), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	body := `{"p":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `,"t":"capped"}`
	tb.rdb.HSet(tb.ctx, tb.key("default", "jobs"), "deep", body)
	tb.rdb.ZAdd(tb.ctx, tb.key("default", "scheduled"), redis.Z{Score: 0, Member: "deep"})
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "fine", Type: "capped", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	start(t, tb.config(t))
	in := deadletter.New(tb.b)
	redistest.WaitFor(t, 5*time.Second, "unreadable job dead-lettered, the other handled", func() bool {
		r, err := in.Get(tb.ctx, "default", "deep")
		_, fine := handled.Load("fine")
		return err == nil && strings.Contains(r.Error, "could not read its type") && r.Type == "capped" && string(r.Body) == body && fine
	})
	if _, ran := handled.Load("deep"); ran {
		t.Fatal("the job whose type the claim could not read ran")
	}
}

func TestPriorityAndWeights(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("prio")
	var mu sync.Mutex
	var order []string
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		order = append(order, j.Queue)
		mu.Unlock()
		return nil
	})
	for _, q := range []string{"low", "high"} {
		args := make([]payload, 20)
		if _, err := typ.EnqueueItems(tb.ctx, tb.b, testkit.Items(args, job.Queue(q))); err != nil {
			t.Fatal(err)
		}
	}
	cfg := tb.config(t)
	cfg.Concurrency = 1
	cfg.StrictPriority = true
	cfg.Queues = []worker.Queue{{Name: "high"}, {Name: "low"}}
	start(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "all handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 40
	})
	mu.Lock()
	defer mu.Unlock()
	for i, q := range order {
		if want := map[bool]string{true: "high", false: "low"}[i < 20]; q != want {
			t.Fatalf("job %d came from %s, want %s: %v", i, q, want, order)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, tc := range []struct {
		mod  func(*worker.Options)
		want string
	}{
		{func(c *worker.Options) { c.Broker = nil }, "Options.Broker is required"},
		{func(c *worker.Options) { c.Registry = nil }, "Options.Registry is required"},
		{func(c *worker.Options) { c.Queues = []worker.Queue{{Name: "a{b}"}} }, `queue name "a{b}" contains '{'`},
		{func(c *worker.Options) { c.Queues = []worker.Queue{{Name: "a"}, {Name: "a"}} }, `queue "a" is listed twice`},
		{func(c *worker.Options) { c.Concurrency = -1 }, "Concurrency -1 is negative"},
		{func(c *worker.Options) { c.Lease = time.Millisecond }, "Lease 1ms is below 10ms"},
		{func(c *worker.Options) { c.Lease, c.HeartbeatInterval = 100*time.Millisecond, time.Second }, "HeartbeatInterval 1s is not below Lease 100ms"},
		{func(c *worker.Options) { c.Lease, c.HeartbeatInterval = time.Second, time.Second }, "HeartbeatInterval 1s is not below Lease 1s"},
		{func(c *worker.Options) {
			c.Retry = retry.Exponential{Initial: time.Second, Multiplier: 0.5, Max: time.Hour}
		},
			"Options.Retry: retry: exponential multiplier must be finite and >= 1, got 0.5"},
		{func(c *worker.Options) {
			c.Registry = job.NewRegistry()
			typ := job.New[payload]("bad.backoff", job.Retry(retry.Exponential{Initial: time.Minute, Multiplier: 2, Max: time.Second}))
			typ.Handle(c.Registry, func(context.Context, *job.Job[payload]) error { return nil })
		}, `type "bad.backoff": job.Retry: retry: exponential max delay 1s is below the initial delay 1m0s`},
		{func(c *worker.Options) { c.Retry = retry.Exponential{} }, "exponential initial delay must be > 0, got 0s"},
	} {
		cfg := tb.config(t)
		tc.mod(&cfg)
		if _, err := worker.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

// A worker spreads its claims over the shards of a sharded queue: with one
// slot, three claims in a row take one job from each of three shards,
// whatever shard the jobs are in.
func TestClaimsRotateOverShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.DeclareQueue(tb.ctx, "spread", 3); err != nil {
		t.Fatal(err)
	}
	shards := testkit.Shards(t, tb.b, "spread")
	typ := job.New[payload]("spread", job.Queue("spread"))
	var mu sync.Mutex
	var from []int
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		from = append(from, keyspace.Route(shards, j.ID).Index())
		mu.Unlock()
		return nil
	})
	args := make([]payload, 60)
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, testkit.Items(args)); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Queues = []worker.Queue{{Name: "spread"}}
	cfg.Concurrency = 1
	cfg.Prefetch = -1 // one job per claim
	start(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "15 jobs handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(from) >= 15
	})
	mu.Lock()
	defer mu.Unlock()
	for round := range 5 {
		three := slices.Sorted(slices.Values(from[3*round : 3*round+3]))
		if !slices.Equal(three, []int{0, 1, 2}) {
			t.Fatalf("claims %d to %d took jobs from shards %v, want one from each (all: %v)", 3*round+1, 3*round+3, three, from)
		}
	}
}
