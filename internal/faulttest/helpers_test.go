package faulttest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// serverArgs are the redis-server options of every suite's server, before
// its own. Redis 7 allocates a latency histogram for each command the first
// time it runs; that is server bookkeeping, not data, and would hide what the
// memory check looks for, so it is off.
var serverArgs = []string{"--latency-tracking", "no"}

// startServer starts the suite's dedicated redis-server with serverArgs and
// args.
func startServer(t *testing.T, args ...string) *redistest.Server {
	t.Helper()
	return redistest.Start(t, append(slices.Clone(serverArgs), args...)...)
}

// memorySlack is how far Redis memory may end above where a suite started,
// once its jobs are done and its dead records purged.
const memorySlack = 32 << 10

// skipSlow skips a slow fault suite unless DELAYQ_FAULT_SUITES=1 (which
// .ci/run sets for the run that prints the summaries) and -short is off. They
// load both cores for about a minute, so they run on their own rather than
// beside every other package's tests.
func skipSlow(t *testing.T) {
	t.Helper()
	if testing.Short() || os.Getenv("DELAYQ_FAULT_SUITES") != "1" {
		t.Skip("slow fault suite: set DELAYQ_FAULT_SUITES=1 and leave -short off to run it (.ci/run does)")
	}
}

// suite is what every fault suite shares: a dedicated redis-server, the
// test's own client and broker, and the baselines the leak checks compare
// against.
type suite struct {
	ctx context.Context
	srv *redistest.Server
	rdb *redis.Client
	ns  string
	b   *broker.Broker
	mem int64 // used_memory after warm-up
}

// newSuite starts the leak checks of a suite on srv: goroutines are compared
// at cleanup with those running now (suites are not parallel, so nothing
// else starts any meanwhile), Redis keys and memory by finish.
func newSuite(t *testing.T, srv *redistest.Server, ns string, queues ...string) *suite {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if !t.Failed() {
			// The waiter of a restarted redis-server belongs to the server,
			// which is killed by its own cleanup after this one.
			goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/delayq/delayq/internal/redistest.launchArgs.func1"))
		}
	})
	s := &suite{ctx: context.Background(), srv: srv, rdb: srv.Client(t), ns: ns}
	b, err := broker.New(s.rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	s.b = b
	for _, q := range queues {
		s.warmUp(t, q)
	}
	s.mem = s.usedMemory(t)
	return s
}

// warmUp runs every script once on queue q, so that the script cache and the
// queue's small permanent keys (the fencing counter, the set of queue
// names) are part of the memory baseline.
func (s *suite) warmUp(t *testing.T, q string) {
	t.Helper()
	ctx, b := s.ctx, s.b
	var envs []*job.Envelope
	for _, id := range []string{"warm-a", "warm-b", "warm-c"} {
		envs = append(envs, &job.Envelope{ID: id, Queue: q, Type: "warm.up", Payload: []byte(`{}`)})
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	must(b.Enqueue(ctx, envs...))
	res, err := testkit.Drive(b).Claim(ctx, q, 3, time.Minute)
	must(err)
	if len(res.Jobs) != 3 {
		t.Fatalf("warm-up claimed %d jobs, want 3", len(res.Jobs))
	}
	a, bb, c := res.Jobs[0], res.Jobs[1], res.Jobs[2]
	must(testkit.Drive(b).Extend(ctx, time.Minute, a.Lease))
	_, err = testkit.Drive(b).Retry(ctx, a.Lease, 0, a.Envelope)
	must(err)
	_, err = testkit.Drive(b).Kill(ctx, bb.Lease, &job.DeadRecord{Body: bb.Body, Error: "warm-up"})
	must(err)
	must(testkit.Drive(b).Release(ctx, c.Lease))
	_, err = testkit.Drive(b).Reap(ctx, q, 10)
	must(err)
	_, err = testkit.OneStats(b.Stats(ctx, q))
	must(err)
	_, err = b.Cancel(ctx, q, a.ID)
	must(err)
	_, err = b.Reschedule(ctx, q, c.ID, time.Time{})
	must(err)
	must(deadletter.New(b).Redrive(ctx, q, 0, bb.ID))
	res, err = testkit.Drive(b).Claim(ctx, q, 3, time.Minute)
	must(err)
	for _, j := range res.Jobs {
		must(testkit.Drive(b).Ack(ctx, j.Lease))
	}
	_, err = deadletter.New(b).Trim(ctx, q)
	must(err)
	_, _, err = protocol.Dead(b).Page(ctx, q, protocol.DeadCursor{}, 10)
	must(err)
	_ = deadletter.New(b).Delete(ctx, q, "warm-none") // not found, by design
	_, err = deadletter.New(b).DeleteAll(ctx, q, deadletter.Filter{}, deadletter.BulkOptions{})
	must(err)
	if st, err := testkit.OneStats(b.Stats(ctx, q)); err != nil || st.Scheduled+st.Processing+st.Dead != 0 {
		t.Fatalf("warm-up left %+v, %v", st, err)
	}
}

// usedMemory returns what Redis holds for data: used_memory less the
// buffers of connected clients (which come and go with connections, not with
// jobs), read after emptying the slow log (which keeps the arguments of the
// last slow commands, e.g. large enqueue batches, whatever the keys hold).
func (s *suite) usedMemory(t *testing.T) int64 {
	t.Helper()
	if err := s.rdb.SlowLogReset(s.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := s.rdb.InfoMap(s.ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n [2]int64
	for i, field := range []string{"used_memory", "mem_clients_normal"} {
		if n[i], err = strconv.ParseInt(info["Memory"][field], 10, 64); err != nil {
			t.Fatalf("INFO memory %s: %v", field, err)
		}
	}
	return n[0] - n[1]
}

// finish checks that the queues hold no job any more: only dead records
// (counted, then purged) and the small keys that stay by design. extra are
// the test's own keys, deleted here. Then it waits for Redis memory to come
// back to within memorySlack of the baseline and reports the difference.
func (s *suite) finish(t *testing.T, queues []string, extra ...string) (dead int64) {
	t.Helper()
	if len(extra) > 0 {
		if err := s.rdb.Del(s.ctx, extra...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// ns:queues and ns:shards name the queues and their shard counts, and
	// ns:queues:seen when each was last used (for forgetting idle ones); seq
	// is a queue's fencing counter; hist:<minute> keys are the dashboard's
	// per-minute counts, which expire by themselves after a day; w:<worker>
	// keys are workers' last calls, which expire a lease after their last
	// write (checked below); c:<call id> keys are the first answers of
	// producers' and operators' calls, which expire after the broker's
	// resend window (checked, then deleted, so that the memory compared
	// below is what stays).
	allowed := []string{s.ns + ":queues", s.ns + ":shards", keyspace.QueuesSeenKey(s.ns)}
	var allowedPrefixes []string
	for _, q := range queues {
		for _, sh := range testkit.Shards(t, s.b, q) {
			k := sh.Keys()
			allowed = append(allowed, k.Seq, k.Dead, k.DeadIndex)
			// The lease hashes, and those of capped jobs and keys, stay
			// with their encoding field only.
			keyrun := strings.TrimSuffix(k.Held, "held:") + "keyrun"
			for _, h := range []string{k.Attempts, k.Leases, k.Running, keyrun} {
				if fields := hashFields(t, s.ctx, s.rdb, h); len(fields) > 0 {
					t.Errorf("%s holds %v, want no job", h, fields)
				}
				allowed = append(allowed, h)
			}
			allowedPrefixes = append(allowedPrefixes, k.Hist)
			for _, w := range redistest.Keys(t, s.rdb, k.Workers+"*") {
				if ttl := s.rdb.PTTL(s.ctx, w).Val(); ttl <= 0 {
					t.Errorf("worker record %s does not expire (TTL %v)", w, ttl)
				}
			}
			allowedPrefixes = append(allowedPrefixes, k.Workers)
		}
	}
	// Call records of any queue of the namespace (an outbox relay probes
	// Redis with a cancel in the default queue).
	calls := redistest.Keys(t, s.rdb, s.ns+":{*}:c:*")
	for _, c := range calls {
		if ttl := s.rdb.PTTL(s.ctx, c).Val(); ttl <= 0 || ttl > defaultResendWindow {
			t.Errorf("call record %s expires in %v, want within the resend window %v", c, ttl, defaultResendWindow)
		}
		allowed = append(allowed, c)
	}
	// The process registry: a SIGKILLed worker or relay leaves its record
	// and its place in the index until its TTL runs out (checked, then
	// deleted like the call records).
	fk := keyspace.Fleet(s.ns)
	procs := redistest.Keys(t, s.rdb, fk.Proc+"*")
	if n, _ := s.rdb.Exists(s.ctx, fk.Index).Result(); n == 1 {
		procs = append(procs, fk.Index)
	}
	for _, k := range procs {
		if ttl := s.rdb.PTTL(s.ctx, k).Val(); ttl <= 0 || ttl > fleetreg.DefaultTTL {
			t.Errorf("process registry key %s expires in %v, want within %v", k, ttl, fleetreg.DefaultTTL)
		}
		allowed = append(allowed, k)
	}
	calls = append(calls, procs...)
	keys, err := s.rdb.Keys(s.ctx, s.ns+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !slices.Contains(allowed, k) && !slices.ContainsFunc(allowedPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			n, _ := s.rdb.Type(s.ctx, k).Result()
			t.Errorf("key %s (%s) left behind", k, n)
		}
	}
	for _, q := range queues {
		res, err := deadletter.New(s.b).DeleteAll(s.ctx, q, deadletter.Filter{}, deadletter.BulkOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dead += int64(res.Done)
	}
	// Call records and registry keys would expire by themselves.
	if len(calls) > 0 {
		if err := s.rdb.Unlink(s.ctx, calls...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var mem int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		mem = s.usedMemory(t)
		if mem-s.mem <= memorySlack || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // closed clients are freed by the server's event loop
	}
	t.Logf("redis memory: %d bytes at start, %d at the end (%+d)", s.mem, mem, mem-s.mem)
	if mem-s.mem > memorySlack {
		t.Errorf("redis memory grew by %d bytes, more than %d", mem-s.mem, memorySlack)
	}
	return dead
}

// client returns a new client of the suite's server with opts applied,
// closed at cleanup.
func (s *suite) client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: s.srv.TLSConfig()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// runWorker runs an in-process worker until the returned stop is called
// (stop waits for Run to return) or the test ends.
func runWorker(t *testing.T, cfg worker.Options) (stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		// Faults make workers log errors by design; -v output keeps to the
		// summaries.
		l := zerolog.Nop()
		cfg.Logger = &l
	}
	return testkit.StartWorker(t, cfg)
}

// waitDrained waits until queue has nothing scheduled, processing, parked
// or held.
func (s *suite) waitDrained(t *testing.T, queue string, timeout time.Duration) {
	t.Helper()
	waitDrained(t, s.b, queue, timeout)
}

// waitDrained waits until b's queue has nothing scheduled, processing,
// parked or held.
func waitDrained(t *testing.T, b *broker.Broker, queue string, timeout time.Duration) {
	t.Helper()
	redistest.WaitFor(t, timeout, "queue "+queue+" drained", func() bool {
		st, err := testkit.OneStats(b.Stats(context.Background(), queue))
		return err == nil && st.Scheduled == 0 && st.Processing == 0 && st.Parked == 0 && st.Held == 0
	})
}

// summary logs one line of a suite's results in a form .ci/run shows.
func summary(t *testing.T, fields ...any) {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(fields); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v = %v", fields[i], fields[i+1])
	}
	t.Logf("SUMMARY %s: %s", t.Name(), b.String())
}

// hashFields returns the fields of the hash key but keyspace.EncodingField,
// which the claim keeps in the lease and cap hashes: their job ids or keys.
func hashFields(t *testing.T, ctx context.Context, rdb redis.UniversalClient, key string) []string {
	t.Helper()
	fields, err := rdb.HKeys(ctx, key).Result()
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return slices.DeleteFunc(fields, func(f string) bool { return f == keyspace.EncodingField })
}

// defaultResendWindow is the broker's default Options.ResendWindow.
const defaultResendWindow = 2 * time.Minute
