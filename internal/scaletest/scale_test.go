package scaletest_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestShardedQueueSpreadsOverMasters puts 30,000 jobs on a queue with one
// shard per master and counts, on each master itself, the jobs it holds;
// then workers handle every job exactly once.
func TestShardedQueueSpreadsOverMasters(t *testing.T) {
	needScale(t)
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t)
	b := newBroker(t, c.Client(t), "spread", false)
	if err := b.DeclareQueue(ctx, "hot", 3); err != nil {
		t.Fatal(err)
	}
	const n = 30_000
	l := newLedger()
	if err := l.produce(ctx, b, "hot", jobIDs("s", n), 500, 0); err != nil {
		t.Fatal(err)
	}

	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	var counts []string
	for _, m := range masters {
		node := redis.NewClient(&redis.Options{Addr: m.Addr()})
		var held int64
		iter := node.Scan(ctx, 0, "spread:{hot#*}:scheduled", 1000).Iterator()
		for iter.Next(ctx) {
			held += node.ZCard(ctx, iter.Val()).Val()
		}
		err := iter.Err()
		_ = node.Close()
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, fmt.Sprintf("%s: %d", m.Addr(), held))
		if dev := math.Abs(float64(held)-n/3) / (n / 3); dev > 0.15 {
			t.Errorf("master %s holds %d jobs, %.0f%% off an even third", m.Addr(), held, 100*dev)
		}
	}
	t.Logf("SPREAD 30,000 jobs over 3 shards: %s", strings.Join(counts, ", "))

	for range 2 {
		l.work(t, newBroker(t, c.Client(t), "spread", false), "hot", 50, 30*time.Second)
	}
	l.settle(15*time.Second, 3*time.Minute)
	r := l.tally(ctx, t, b, "hot")
	t.Logf("SPREAD %v", r)
	if r.accepted != n || r.lost != 0 || r.duplicated != 0 || r.handled != n {
		t.Fatalf("want every one of %d jobs handled once: %v", n, r)
	}
}

// cut is how long the replication link is down before the master dies in
// the "link cut" scenario: writes the master acknowledges meanwhile reach
// no replica. (Pausing the replica would not do: the kernel buffers the
// stream on the replica's socket, and it reads it after it resumes.)
const cut = 300 * time.Millisecond

// cutLink drops the replication link of master and keeps its replica from
// reconnecting (its AUTH fails), for cut; the caller kills the master next
// and then calls the returned heal. The replica is promoted all the same.
func cutLink(t *testing.T, master, replica *redistest.Server) (heal func()) {
	t.Helper()
	ctx := context.Background()
	r := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	m := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer m.Close()
	if err := r.ConfigSet(ctx, "masterauth", "no-such-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(cut)
	return func() {
		defer r.Close()
		if err := r.ConfigSet(ctx, "masterauth", "").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterFailover kills the master of one shard while 20,000 jobs go
// through a three-shard queue; its replica takes over and the producers and
// workers carry on by themselves (the killed node is restarted and rejoins
// as a replica, as an operator would bring it back). Each scenario runs
// with asynchronous replication and with WaitReplicas: 1, which must lose
// nothing: "kill" crashes the master of a replica in sync, "link cut"
// crashes it after its replication link was down for a moment.
func TestClusterFailover(t *testing.T) {
	needScale(t)
	t.Parallel()
	c := redistest.StartCluster(t)
	crash := func(lagging bool) func(*testing.T, admin.Shard) {
		return func(t *testing.T, shard admin.Shard) {
			node := c.MasterOf(t, "{"+shard.Name+"}")
			if lagging {
				heal := cutLink(t, node, c.ReplicaOf(t, node))
				node.Kill()
				heal()
			} else {
				node.Kill()
			}
			start := time.Now()
			c.WaitHealthy(t, false)
			t.Logf("killed master %s of shard %s; its replica serves the slot after %v", node.Addr(), shard.Name, time.Since(start).Round(10*time.Millisecond))
			node.Restart(t)
			c.WaitHealthy(t, true)
			t.Logf("the old master is back as a replica after %v", time.Since(start).Round(10*time.Millisecond))
		}
	}
	for _, lagging := range []bool{false, true} {
		for _, durable := range []bool{false, true} {
			t.Run(scenario(lagging)+"/"+mode(durable), func(t *testing.T) {
				failover(t, "cluster", scenario(lagging), durable, func() redis.UniversalClient { return c.Client(t) }, crash(lagging))
			})
		}
	}
}

// TestSentinelFailover is TestClusterFailover with a master, a replica and
// three Sentinels: the master is killed, the Sentinels promote the replica
// and the failover client follows.
func TestSentinelFailover(t *testing.T) {
	needScale(t)
	t.Parallel()
	s := redistest.StartSentinel(t)
	crash := func(lagging bool) func(*testing.T, admin.Shard) {
		return func(t *testing.T, _ admin.Shard) {
			m := s.Master(t)
			if lagging {
				replica := s.Servers()[0]
				if replica == m {
					replica = s.Servers()[1]
				}
				heal := cutLink(t, m, replica)
				m.Kill()
				heal()
			} else {
				m.Kill()
			}
			start := time.Now()
			redistest.WaitFor(t, time.Minute, "promotion", func() bool { return s.Master(t) != m })
			t.Logf("killed master %s; the Sentinels promoted the replica after %v", m.Addr(), time.Since(start).Round(10*time.Millisecond))
			s.Rejoin(t, m)
			t.Logf("the old master is back as a replica after %v", time.Since(start).Round(10*time.Millisecond))
		}
	}
	for _, lagging := range []bool{false, true} {
		for _, durable := range []bool{false, true} {
			t.Run(scenario(lagging)+"/"+mode(durable), func(t *testing.T) {
				failover(t, "sentinel", scenario(lagging), durable, func() redis.UniversalClient { return s.Client(t) }, crash(lagging))
			})
		}
	}
}

func scenario(lagging bool) string {
	if lagging {
		return "link-cut"
	}
	return "kill"
}

func mode(durable bool) string {
	if durable {
		return "durable"
	}
	return "default"
}

// failover runs two producers and two workers, each with its own client,
// over a three-shard queue, calls crash once a quarter of the jobs are in,
// and reports what was lost and duplicated.
func failover(t *testing.T, topo, scenario string, durable bool, client func() redis.UniversalClient, crash func(*testing.T, admin.Shard)) {
	ctx := context.Background()
	const n = 20_000
	ns := "fo-" + scenario + "-" + mode(durable)
	first := newBroker(t, client(), ns, durable)
	if err := first.DeclareQueue(ctx, "hot", 3); err != nil {
		t.Fatal(err)
	}
	shards, err := protocol.Admin(first).Shards(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	ids := jobIDs("f", n)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var producers sync.WaitGroup
	for i, b := range []*broker.Broker{first, newBroker(t, client(), ns, durable)} {
		part := ids[i*n/2 : (i+1)*n/2]
		producers.Go(func() {
			if err := l.produce(pctx, b, "hot", part, 50, 5*time.Millisecond); err != nil {
				t.Errorf("producer: %v", err)
			}
		})
	}
	for range 2 {
		l.work(t, newBroker(t, client(), ns, durable), "hot", 20, 3*time.Second)
	}
	redistest.WaitFor(t, 2*time.Minute, "a quarter of the jobs accepted", func() bool {
		a, h := l.counts()
		return a >= n/4 && h >= n/8
	})
	a, h := l.counts()
	t.Logf("crash with %d jobs accepted and %d handled", a, h)
	crash(t, shards[0])
	producers.Wait()
	l.settle(10*time.Second, 3*time.Minute)
	r := l.tally(ctx, t, first, "hot")
	t.Logf("FAILOVER %s, %s, %s mode: %v", topo, scenario, mode(durable), r)
	if r.accepted != n {
		t.Fatalf("producers got %d of %d jobs accepted", r.accepted, n)
	}
	if durable && r.lost != 0 {
		t.Fatalf("durable mode lost %d jobs", r.lost)
	}
}

// BenchmarkThroughput moves b.N jobs through a queue of one shard and of
// three shards on the three-master cluster: four producers enqueue in
// batches of 100 while two workers of 50 slots each handle them, every
// producer and worker with a client of its own. It reports jobs per second
// from the first enqueue to the last handled job, and how busy the busiest
// master and this process were (CPU time over wall time: 100% is one
// core). Run it with
//
//	DELAYQ_TEST_SCALE=1 go test -run '^$' -bench Throughput -benchtime 20000x ./internal/scaletest/
func BenchmarkThroughput(b *testing.B) {
	needScale(b)
	c := redistest.StartCluster(b)
	ctx := context.Background()
	for _, shards := range []int{1, 3} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			ns := fmt.Sprintf("bench-%d-%d-%d", shards, b.N, time.Now().UnixNano())
			first := newBroker(b, c.Client(b), ns, false)
			if err := first.DeclareQueue(ctx, "hot", shards); err != nil {
				b.Fatal(err)
			}
			l := newLedger()
			for range 2 {
				l.work(b, newBroker(b, c.Client(b), ns, false), "hot", 50, 30*time.Second)
			}
			ids := jobIDs("b", b.N)
			masters := c.Masters(b)
			cpu0, self0 := masterCPU(b, masters), selfCPU()
			b.ResetTimer()
			start := time.Now()
			var producers sync.WaitGroup
			const np = 4
			for i := range np {
				pb := first
				if i > 0 {
					pb = newBroker(b, c.Client(b), ns, false)
				}
				part := ids[i*b.N/np : (i+1)*b.N/np]
				producers.Go(func() {
					if err := l.produce(ctx, pb, "hot", part, 100, 0); err != nil {
						b.Error(err)
					}
				})
			}
			producers.Wait()
			for {
				if _, h := l.counts(); h >= b.N {
					break
				}
				time.Sleep(time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cpu1, self1 := masterCPU(b, masters), selfCPU()
			var busiest time.Duration
			for i := range cpu1 {
				busiest = max(busiest, cpu1[i]-cpu0[i])
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
			b.ReportMetric(100*busiest.Seconds()/elapsed.Seconds(), "busiest-master-cpu-%")
			b.ReportMetric(100*(self1-self0).Seconds()/elapsed.Seconds(), "go-cpu-%")
		})
	}
}

// masterCPU returns the CPU time each master has used (INFO cpu).
func masterCPU(b *testing.B, masters []*redistest.Server) []time.Duration {
	out := make([]time.Duration, len(masters))
	for i, m := range masters {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		info, err := rdb.Info(context.Background(), "cpu").Result()
		_ = rdb.Close()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, _ := strconv.ParseFloat(v, 64)
				out[i] += time.Duration(f * float64(time.Second))
			}
		}
	}
	return out
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBrokerFollowsPromotion checks that a broker whose cluster client
// knew the old master finds the promoted replica within seconds, in both
// modes, although go-redis refreshes its slot map on its own only once a
// minute when a node merely stops answering.
func TestBrokerFollowsPromotion(t *testing.T) {
	needScale(t)
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t)
	plain := newBroker(t, c.Client(t), "follow", false)
	durable := newBroker(t, c.Client(t), "follow", true)
	for i, b := range []*broker.Broker{plain, durable} {
		e, err := noop.Envelope(struct{}{}, job.ID("before"+strconv.Itoa(i)), job.Queue("q"))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Enqueue(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	master := c.MasterOf(t, "follow:{q}:jobs")
	master.Kill()
	c.WaitHealthy(t, false)
	enqueued := func(b *broker.Broker, id string) func() bool {
		return func() bool {
			e, err := noop.Envelope(struct{}{}, job.ID(id), job.Queue("q"))
			if err != nil {
				t.Fatal(err)
			}
			return b.Enqueue(ctx, e) == nil
		}
	}
	start := time.Now()
	redistest.WaitFor(t, 10*time.Second, "enqueue on the promoted replica", enqueued(plain, "after0"))
	t.Logf("default mode: enqueue works again %v after the promotion", time.Since(start).Round(10*time.Millisecond))
	// The durable broker needs a replica: bring the old master back as one.
	master.Restart(t)
	c.WaitHealthy(t, true)
	start = time.Now()
	redistest.WaitFor(t, 10*time.Second, "durable enqueue on the promoted replica", enqueued(durable, "after1"))
	t.Logf("durable mode: enqueue works again %v after the old master rejoined", time.Since(start).Round(10*time.Millisecond))
	st, err := testkit.OneStats(plain.Stats(ctx, "q"))
	if err != nil || st.Scheduled != 4 {
		t.Fatalf("stats %+v, %v; want the 4 jobs", st, err)
	}
}
