package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// The tests of prefetching as a default: what a worker may hold beyond
// Concurrency, and that the guarantees hold for what it holds.

// enqueueN stores n jobs of typ, due at once, ids "<prefix><i>".
func enqueueN(t *testing.T, tb *testBundle, typ *job.Type[payload], prefix string, n int) {
	t.Helper()
	items := make([]job.Item[payload], n)
	for i := range items {
		items[i] = job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.ID(fmt.Sprintf("%s%d", prefix, i))}}
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
}

// With the default (adaptive) prefetch and fast handlers, a worker of
// concurrency 1 runs one handler at a time, and every job runs exactly
// once, on attempt 1: nothing lost, nothing delivered twice.
func TestDefaultPrefetchConcurrencyOne(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("fast")
	var running, most atomic.Int32
	var mu sync.Mutex
	seen := map[string]int{}
	var later atomic.Int32
	typ.Handle(tb.reg, func(_ context.Context, j *job.Job[payload]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if j.Attempt != 1 {
			later.Add(1)
		}
		mu.Lock()
		seen[j.ID]++
		mu.Unlock()
		return nil
	})
	const total = 600
	enqueueN(t, tb, typ, "j", total)
	cfg := tb.config(t)
	cfg.Concurrency = 1
	stop := start(t, cfg)
	redistest.WaitFor(t, 20*time.Second, "all jobs handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == total
	})
	stop()
	if m := most.Load(); m != 1 {
		t.Fatalf("%d handlers ran at once, Concurrency is 1", m)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	if n := later.Load(); n != 0 {
		t.Fatalf("%d jobs ran on a later attempt", n)
	}
	tb.queueKeysEmpty(t, naming.DefaultQueue)
}

// claimWatch records what each claim of a worker asked for and got.
type claimWatch struct {
	protocol.Broker
	mu     sync.Mutex
	claims []watchedClaim
}

type watchedClaim struct {
	n, ahead, got int
	controlled    bool
}

func (c *claimWatch) Claim(ctx context.Context, s keyspace.Shard, w protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	res, err := c.Broker.Claim(ctx, s, w, id, n, lease)
	c.mu.Lock()
	c.claims = append(c.claims, watchedClaim{n: n, ahead: w.Ahead, got: len(res.Jobs), controlled: res.Controlled})
	c.mu.Unlock()
	return res, err
}

func (c *claimWatch) all() []watchedClaim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]watchedClaim(nil), c.claims...)
}

// Handlers much slower than a claim round trip get no prefetch by default:
// no claim asks for more than the free goroutines. The adaptive depth is
// Concurrency x round trip / handler time, rounded: with 3 goroutines and
// 400 ms handlers a claim would have to take 67 ms on average to prefetch
// one job, which a loaded machine under -race does not reach (with 60 ms
// handlers, 10 ms claims sufficed, and it did once in 30 runs).
func TestDefaultPrefetchNoneForSlowHandlers(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("slow")
	var done atomic.Int32
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		time.Sleep(400 * time.Millisecond)
		done.Add(1)
		return nil
	})
	enqueueN(t, tb, typ, "s", 12)
	watch := &claimWatch{}
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { watch.Broker = p; return watch })
	cfg.Concurrency = 3
	start(t, cfg)
	redistest.WaitFor(t, 20*time.Second, "all jobs handled", func() bool { return done.Load() == 12 })
	for i, c := range watch.all() {
		if c.ahead != 0 || c.n > 3 {
			t.Fatalf("claim %d asked for %d jobs, %d of them ahead: slow handlers were prefetched for (all: %+v)", i+1, c.n, c.ahead, watch.all())
		}
	}
}

// A queue with a concurrency cap or a rate limit is not prefetched from,
// even with a fixed Prefetch: a lease counted against a cap is a running
// job, and a token of a limit is spent by a start. The jobs beyond the
// goroutines stay scheduled, for any worker to take.
func TestNoPrefetchUnderCapOrLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		set  func(tb *testBundle) error
	}{
		{"queue cap", func(tb *testBundle) error { return tb.b.SetConcurrency(tb.ctx, "default", "", 50) }},
		{"type cap", func(tb *testBundle) error { return tb.b.SetConcurrency(tb.ctx, "default", "capped", 50) }},
		{"type cap, other type", func(tb *testBundle) error { return tb.b.SetConcurrency(tb.ctx, "default", "other", 50) }},
		{"queue rate limit", func(tb *testBundle) error {
			return tb.b.SetRateLimit(tb.ctx, "default", "", job.RateLimit{Count: 1000, Per: time.Second, Burst: 50})
		}},
		{"type rate limit", func(tb *testBundle) error {
			return tb.b.SetRateLimit(tb.ctx, "default", "capped", job.RateLimit{Count: 1000, Per: time.Second, Burst: 50})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			typ, started, release := blockingType(tb, "capped")
			if err := c.set(tb); err != nil {
				t.Fatal(err)
			}
			enqueueN(t, tb, typ, "c", 10)
			cfg := tb.config(t)
			cfg.Concurrency = 2
			cfg.Prefetch = 8
			start(t, cfg)
			defer close(release)
			redistest.WaitFor(t, 5*time.Second, "2 running", func() bool { return started.Load() == 2 })
			time.Sleep(200 * time.Millisecond) // time for a prefetching claim
			if n, _ := tb.rdb.ZCard(tb.ctx, tb.key(naming.DefaultQueue, "processing")).Result(); n != 2 {
				t.Fatalf("%d jobs leased by a worker of 2 goroutines: jobs were prefetched from a queue under a cap or limit", n)
			}
			if n, _ := tb.rdb.ZCard(tb.ctx, tb.key(naming.DefaultQueue, "scheduled")).Result(); n != 8 {
				t.Fatalf("%d jobs scheduled, want the 8 not running", n)
			}
		})
	}
}

// A key cap does not stop the prefetch: a job claimed ahead holds its
// key's slot while it waits for a goroutine, so no key has more than its
// cap of jobs leased (running or waiting in the worker), and no two jobs
// of one key run at once. A worker of 2 goroutines and a prefetch of 8
// leases 10 jobs of 10 keys capped at 1: 2 running, 8 waiting, each key
// once; the rest stay held, and every job runs once; no slot is left.
func TestPrefetchUnderKeyCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("capped")
	release := make(chan struct{})
	var mu sync.Mutex
	running, most, ran := map[string]int{}, 0, 0
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		running[j.Key]++
		most = max(most, running[j.Key])
		mu.Unlock()
		<-release
		mu.Lock()
		running[j.Key]--
		ran++
		mu.Unlock()
		return nil
	})
	if err := tb.b.SetKeyConcurrency(tb.ctx, "default", "", 1); err != nil {
		t.Fatal(err)
	}
	items := make([]job.Item[payload], 30)
	for i := range items {
		// Ids in the order of the schedule: the first claim's 10 are
		// of the 10 keys.
		items[i] = job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.ID(fmt.Sprintf("c%02d", i)), job.Key(fmt.Sprintf("k%d", i%10))}}
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Concurrency = 2
	cfg.Prefetch = 8
	stop := start(t, cfg)
	processing := tb.key(naming.DefaultQueue, "processing")
	redistest.WaitFor(t, 5*time.Second, "2 running and 8 prefetched", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, processing).Result()
		return n == 10
	})
	keyrun := strings.TrimSuffix(tb.key(naming.DefaultQueue, "controls"), "controls") + "keyrun"
	counts, err := tb.rdb.HGetAll(tb.ctx, keyrun).Result()
	if err != nil {
		t.Fatal(err)
	}
	delete(counts, keyspace.EncodingField)
	if len(counts) != 10 {
		t.Errorf("%d keys count leased jobs (%v), want the 10", len(counts), counts)
	}
	for k, v := range counts {
		if v != "1" {
			t.Errorf("key %s counts %s jobs leased, its cap is 1", k, v)
		}
	}
	close(release)
	redistest.WaitFor(t, 20*time.Second, "all 30 jobs run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran == 30
	})
	stop()
	if most != 1 {
		t.Fatalf("%d jobs of one key ran at once under a cap of 1", most)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "default", "", 0); err != nil {
		t.Fatal(err)
	}
	tb.queueKeysEmpty(t, naming.DefaultQueue)
	if f, err := tb.rdb.HKeys(tb.ctx, keyrun).Result(); err != nil || len(f) > 1 || (len(f) == 1 && f[0] != keyspace.EncodingField) {
		t.Errorf("keyrun holds %v (%v): slots left", f, err)
	}
}

// Under a key cap, the shutdown hands the prefetched jobs back with their
// keys' slots: 2 running and 8 prefetched jobs of 10 keys capped at 1;
// once the 8 are back in the schedule only the 2 running keys count a
// slot, and a second worker then runs every job, each once, with no two
// of one key at once and no slot left.
func TestPrefetchUnderKeyCapHandedBackAtShutdown(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("capped")
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := map[string]int{}, 0
	ran := map[int]int{}
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		running[j.Key]++
		most = max(most, running[j.Key])
		mu.Unlock()
		<-release
		mu.Lock()
		running[j.Key]--
		ran[j.Args.N]++
		mu.Unlock()
		return nil
	})
	if err := tb.b.SetKeyConcurrency(tb.ctx, "default", "", 1); err != nil {
		t.Fatal(err)
	}
	items := make([]job.Item[payload], 30)
	for i := range items {
		items[i] = job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.ID(fmt.Sprintf("c%02d", i)), job.Key(fmt.Sprintf("k%d", i%10))}}
	}
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Concurrency = 2
	cfg.Prefetch = 8
	cfg.ShutdownTimeout = 10 * time.Second
	stop := start(t, cfg)
	processing := tb.key(naming.DefaultQueue, "processing")
	keyrun := strings.TrimSuffix(tb.key(naming.DefaultQueue, "controls"), "controls") + "keyrun"
	redistest.WaitFor(t, 5*time.Second, "2 running and 8 prefetched", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, processing).Result()
		return n == 10
	})
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	redistest.WaitFor(t, 5*time.Second, "the 8 prefetched handed back while 2 run", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, processing).Result()
		return n == 2
	})
	counts, err := tb.rdb.HGetAll(tb.ctx, keyrun).Result()
	if err != nil {
		t.Fatal(err)
	}
	delete(counts, keyspace.EncodingField)
	if len(counts) != 2 {
		t.Fatalf("keys counting a slot after the hand-back: %v, want the 2 running", counts)
	}
	close(release)
	<-stopped
	start(t, cfg)
	redistest.WaitFor(t, 20*time.Second, "every job run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 30
	})
	mu.Lock()
	defer mu.Unlock()
	for n, c := range ran {
		if c != 1 {
			t.Errorf("job %d ran %d times", n, c)
		}
	}
	if most != 1 {
		t.Fatalf("%d jobs of one key ran at once under a cap of 1", most)
	}
	redistest.WaitFor(t, 5*time.Second, "no slot left", func() bool {
		f, err := tb.rdb.HKeys(tb.ctx, keyrun).Result()
		return err == nil && (len(f) == 0 || (len(f) == 1 && f[0] == keyspace.EncodingField))
	})
}

// Without a cap or limit, the same worker prefetches: the control above
// is what stops it.
func TestFixedPrefetchWithoutControls(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ, started, release := blockingType(tb, "free")
	enqueueN(t, tb, typ, "p", 12)
	cfg := tb.config(t)
	cfg.Concurrency = 2
	cfg.Prefetch = 8
	start(t, cfg)
	defer close(release)
	redistest.WaitFor(t, 5*time.Second, "2 running and 8 prefetched", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, tb.key(naming.DefaultQueue, "processing")).Result()
		return started.Load() == 2 && n == 10
	})
}

// At shutdown, prefetched jobs that have not started go back at once, not
// after the running handlers end, and without spending an attempt; a job
// whose lease the heartbeat found lost before it started never runs here.
func TestPrefetchedReleasedAtOnceAtShutdown(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ, started, release := blockingType(tb, "held")
	enqueueN(t, tb, typ, "h", 4)
	cfg := tb.config(t)
	cfg.Concurrency = 1
	cfg.Prefetch = 3
	cfg.ShutdownTimeout = 10 * time.Second
	stop := start(t, cfg)
	leased := tb.key(naming.DefaultQueue, "processing")
	redistest.WaitFor(t, 5*time.Second, "1 running and 3 prefetched", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, leased).Result()
		return n == 4 && started.Load() == 1
	})
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	redistest.WaitFor(t, 3*time.Second, "the 3 waiting handed back while the 1 still runs", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, leased).Result()
		return n == 1
	})
	if n, _ := tb.rdb.ZCard(tb.ctx, tb.key(naming.DefaultQueue, "scheduled")).Result(); n != 3 {
		t.Fatalf("%d jobs scheduled again, want the 3 prefetched", n)
	}
	close(release)
	<-stopped
	if s := started.Load(); s != 1 {
		t.Fatalf("%d handlers started, want 1", s)
	}
	// Given back unrun: their attempt is not spent.
	attempts, _ := tb.rdb.HGetAll(tb.ctx, tb.key(naming.DefaultQueue, "attempts")).Result()
	delete(attempts, keyspace.EncodingField)
	for id, a := range attempts {
		if a != "0" {
			t.Errorf("job %s: attempts %s after it was handed back unrun", id, a)
		}
	}
}

// A prefetched job whose lease is lost while it waits (another worker took
// it) is never started by this worker: fencing covers the wait too.
func TestPrefetchedWithLostLeaseNeverStarts(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("fenced")
	var mu sync.Mutex
	ran := map[string]bool{}
	first := make(chan string, 1)
	release := make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		ran[j.ID] = true
		n := len(ran)
		mu.Unlock()
		if n == 1 {
			first <- j.ID
			<-release
		}
		return nil
	})
	enqueueN(t, tb, typ, "f", 3)
	cfg := tb.config(t)
	cfg.Concurrency = 1
	cfg.Prefetch = 2
	cfg.Lease = 600 * time.Millisecond
	cfg.HeartbeatInterval = 50 * time.Millisecond
	start(t, cfg)
	running := <-first
	leases := tb.key(naming.DefaultQueue, "leases")
	redistest.WaitFor(t, 5*time.Second, "3 jobs leased", func() bool {
		n, _ := tb.rdb.HLen(tb.ctx, leases).Result()
		return n == 3+1 // and keyspace.EncodingField
	})
	// Another holder's token on one waiting job: this worker's lease on
	// it is lost.
	var stolen string
	for _, id := range []string{"f0", "f1", "f2"} {
		if id != running {
			stolen = id
			break
		}
	}
	if err := tb.rdb.HSet(tb.ctx, leases, stolen, "999999999").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // several heartbeats
	close(release)
	redistest.WaitFor(t, 5*time.Second, "the third job handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) >= 2
	})
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if ran[stolen] {
		t.Fatalf("job %s ran in a worker whose lease on it was lost", stolen)
	}
	if len(ran) != 2 {
		t.Fatalf("ran %v, want the other two", ran)
	}
}

// When handlers slow down after the adaptive prefetch grew, the jobs that
// wait behind a stalled handler are handed back unrun at the next
// heartbeat (attempt not spent), and the worker stops claiming ahead: the
// other worker runs them meanwhile.
func TestAdaptivePrefetchHandsBackBehindStalledHandler(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("stall")
	var handled atomic.Int32
	var stalledOn atomic.Value
	release := make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if handled.Add(1) == 300 {
			stalledOn.Store(j.ID)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	enqueueN(t, tb, typ, "x", 600)
	cfg := tb.config(t)
	cfg.Concurrency = 1
	cfg.Lease = 3 * time.Second
	cfg.HeartbeatInterval = 100 * time.Millisecond
	start(t, cfg)
	defer close(release)
	redistest.WaitFor(t, 20*time.Second, "the stalled handler", func() bool { return stalledOn.Load() != nil })
	leased := tb.key(naming.DefaultQueue, "processing")
	redistest.WaitFor(t, 3*time.Second, "only the stalled job leased", func() bool {
		n, _ := tb.rdb.ZCard(tb.ctx, leased).Result()
		return n == 1
	})
	attempts, _ := tb.rdb.HGetAll(tb.ctx, tb.key(naming.DefaultQueue, "attempts")).Result()
	delete(attempts, keyspace.EncodingField)
	for id, a := range attempts {
		if id != stalledOn.Load().(string) && a != "0" {
			t.Errorf("job %s: attempts %s after it was handed back unrun", id, a)
		}
	}
	// A second worker takes what was handed back.
	cfg2 := tb.config(t)
	start(t, cfg2)
	redistest.WaitFor(t, 20*time.Second, "all but the stalled job handled", func() bool { return handled.Load() == 600 })
}

// blockingType registers a job type whose handler counts its starts and
// then blocks until release is closed.
func blockingType(tb *testBundle, name string) (typ *job.Type[payload], started *atomic.Int32, release chan struct{}) {
	typ, started, release = job.New[payload](name), new(atomic.Int32), make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		started.Add(1)
		<-release
		return nil
	})
	return typ, started, release
}
