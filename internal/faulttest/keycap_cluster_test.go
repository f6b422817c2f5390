package faulttest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestKeyFlowControlOnCluster runs the per-key controls on a queue of 3
// shards on a local Redis Cluster of 3 masters (redistest.StartCluster),
// the shards served by different masters.
//
//   - caps: 2,400 jobs of 600 keys capped at 3 each (1 per shard) and 200
//     jobs of 5 keys with an override of 6 (2 per shard), run by three
//     faultworker processes of 8 slots connected through
//     redis+cluster://, one SIGKILLed twice: from every handler's start and
//     end records no key ever ran above its own cap, keys reached it, the
//     overridden keys ran above the default, every job succeeded, and at
//     the end no master holds a key's slot count, a held job or any job
//     key of the queue.
//   - rates: 900 jobs of 30 keys limited to 6 starts a second each (a
//     strict window with 200 ms of slack: 2 per shard), run as the caps
//     are: no key's busiest second of handler starts holds more than 6,
//     keys reach 6, every job succeeds, and no held job or waiting key
//     is left on any master.
//   - turns: with fair turns on, 600 due jobs of key A enqueued before 6
//     of key B on a queue of 3 shards: the first claim of 30 over the
//     shards takes every one of B's jobs, each shard dealing its turns
//     over its own jobs; then key C of weight 3 (SetKeyWeight, written on
//     every master) with 60 due jobs: each shard's next claim of 8 takes
//     6 of C's and 2 of A's; turned off, nothing is left held on any
//     master, and weight 1 leaves no weight there.
//   - debounce: 50 debounced enqueues of each of 20 keys, 10 ms apart by
//     the broker's simulated clock, leave one job per key in the shard its
//     key routes to, with the 50th arguments, due one window after the 50th
//     enqueue and not before; each runs once.
func TestKeyFlowControlOnCluster(t *testing.T) {
	skipSlow(t)
	c := redistest.StartCluster(t)
	t.Run("caps", func(t *testing.T) { keyCapsOnCluster(t, c) })
	t.Run("rates", func(t *testing.T) { keyRatesOnCluster(t, c) })
	t.Run("turns", func(t *testing.T) { keyTurnsOnCluster(t, c) })
	t.Run("debounce", func(t *testing.T) { debounceOnCluster(t, c) })
}

// spreadShards declares queue with 3 shards and fails the test unless
// they are served by 3 different masters of c.
func spreadShards(t *testing.T, c *redistest.Cluster, b *broker.Broker, queue string) {
	t.Helper()
	if err := b.DeclareQueue(context.Background(), queue, 3); err != nil {
		t.Fatal(err)
	}
	var masters []string
	for _, sh := range testkit.Shards(t, b, queue) {
		if m := c.MasterOf(t, sh.Keys().Scheduled).Addr(); !slices.Contains(masters, m) {
			masters = append(masters, m)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("the 3 shards of %q are on %d masters (%v), want one each", queue, len(masters), masters)
	}
}

func keyCapsOnCluster(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	bin := buildFaultWorker(t)
	rdb := c.Client(t)
	const ns, queue, keys, perKey, defaultCap = "keycapcluster", naming.DefaultQueue, 600, 4, 3
	const bigKeys, perBig, bigCap = 5, 40, 6
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	spreadShards(t, c, b, queue)
	if err := b.SetKeyConcurrency(ctx, queue, "", defaultCap); err != nil {
		t.Fatal(err)
	}
	caps := map[string]int{}
	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	var envs []*job.Envelope
	add := func(key string, n, cap int) {
		caps[key] = cap
		for i := range n {
			e, err := typ.Envelope(crashArgs{N: len(envs)}, job.ID(fmt.Sprintf("%s-%d", key, i)), job.Key(key))
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, e)
		}
	}
	// The big keys' ids sort first, so their jobs are claimed first among
	// jobs due at once: they run beside the others all along.
	for k := range bigKeys {
		key := fmt.Sprintf("big%d", k)
		if err := b.SetKeyConcurrency(ctx, queue, key, bigCap); err != nil {
			t.Fatal(err)
		}
		add(key, perBig, bigCap)
	}
	for k := range keys {
		add(fmt.Sprintf("k%04d", k), perKey, defaultCap)
	}
	for chunk := range slices.Chunk(envs, 500) {
		if err := b.Enqueue(ctx, chunk...); err != nil {
			t.Fatal(err)
		}
	}
	total := len(envs)

	keyOf := func(id string) string { k, _, _ := strings.Cut(id, "-"); return k }
	k := killRun{bin: bin, url: "redis+cluster://" + strings.Join(c.Addrs(), ","), rdb: rdb, b: b, ns: ns, queue: queue,
		delay: "60ms", drain: 120 * time.Second, group: keyOf}.run(t)

	over, atCap, bigAboveDefault, most := 0, 0, 0, 0
	for key, evs := range k.events {
		cap, ok := caps[key]
		if !ok {
			t.Fatalf("handlers of key %q, which no job has", key)
		}
		top := peak(evs)
		most = max(most, top)
		if top > cap {
			over++
			if over <= 5 {
				t.Errorf("key %s: %d handlers at once under a cap of %d", key, top, cap)
			}
		}
		if top == cap {
			atCap++
		}
		if cap == bigCap && top > defaultCap {
			bigAboveDefault++
		}
	}
	if over > 0 {
		t.Errorf("%d keys ran above their cap", over)
	}
	if atCap == 0 {
		t.Errorf("no key reached its cap: this run shows nothing")
	}
	if bigAboveDefault == 0 {
		t.Errorf("no key with its own cap of %d ran more than the default %d at once: the override showed nothing", bigCap, defaultCap)
	}
	k.check(t, total)

	// No slot, held job or job is left on any master.
	for _, sh := range testkit.Shards(t, b, queue) {
		kk := sh.Keys()
		p := strings.TrimSuffix(kk.Controls, "controls")
		for _, key := range []string{p + "keyheld", kk.Scheduled, kk.Processing, kk.Jobs} {
			if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("%s left after the drain (%v): a slot or job leaked", key, err)
			}
		}
		for _, key := range []string{p + "keyrun", kk.Running, kk.Leases} {
			if left := hashFields(t, ctx, rdb, key); len(left) > 0 {
				t.Errorf("%s holds %v after the drain: a slot or job leaked", key, left)
			}
		}
	}
	for _, m := range c.Masters(t) {
		node := m.Client(t)
		held := redistest.Keys(t, node, ns+":{*}:held:*")
		if len(held) > 0 {
			t.Errorf("master %s holds %v after the drain", m.Addr(), held)
		}
	}
	for k := range bigKeys {
		if err := b.SetKeyConcurrency(ctx, queue, fmt.Sprintf("big%d", k), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetKeyConcurrency(ctx, queue, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{ns + ":log", ns + ":spans"} { // in two slots
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Error(err)
		}
	}
	summary(t, "jobs", total, "keys", keys+bigKeys, "shards", 3, "masters", 3, "workers", 3, "kills", k.kills,
		"handlers cut by a kill", k.cut, "default cap", defaultCap, "big keys' cap", bigCap, "most of one key at once", most,
		"keys that reached their cap", atCap, "big keys above the default", bigAboveDefault, "keys above their cap", over)
}

func keyRatesOnCluster(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	bin := buildFaultWorker(t)
	rdb := c.Client(t)
	const ns, queue, keys, perKey, rate = "keyratecluster", naming.DefaultQueue, 30, 30, 6
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	spreadShards(t, c, b, queue)
	if err := b.SetKeyRateLimit(ctx, queue, "", job.RateLimit{Count: rate, Per: time.Second, Strict: true, Slack: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	var envs []*job.Envelope
	for k := range keys {
		for i := range perKey {
			e, err := typ.Envelope(crashArgs{N: len(envs)}, job.ID(fmt.Sprintf("r%02d-%d", k, i)), job.Key(fmt.Sprintf("r%02d", k)))
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, e)
		}
	}
	if err := b.Enqueue(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	keyOf := func(id string) string { k, _, _ := strings.Cut(id, "-"); return k }
	k := killRun{bin: bin, url: "redis+cluster://" + strings.Join(c.Addrs(), ","), rdb: rdb, b: b, ns: ns, queue: queue,
		delay: "20ms", drain: 120 * time.Second, group: keyOf}.run(t)
	over, atRate, busiest := 0, 0, 0
	for key, evs := range k.events {
		top := checkKeyRate(t, key, evs, rate, &over)
		busiest = max(busiest, top)
		if top == rate {
			atRate++
		}
	}
	if atRate == 0 {
		t.Errorf("no key reached its rate of %d/s: this run shows nothing", rate)
	}
	k.check(t, len(envs))
	for _, sh := range testkit.Shards(t, b, queue) {
		kk := sh.Keys()
		p := strings.TrimSuffix(kk.Controls, "controls")
		for _, key := range []string{p + "keyheld", p + "keywait", kk.Scheduled, kk.Processing, kk.Jobs} {
			if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("%s left after the drain (%v): a held job or waiting key leaked", key, err)
			}
		}
	}
	if err := b.SetKeyRateLimit(ctx, queue, "", job.RateLimit{}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{ns + ":log", ns + ":spans"} { // in two slots
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Error(err)
		}
	}
	summary(t, "jobs", len(envs), "keys", keys, "shards", 3, "masters", 3, "workers", 3, "kills", k.kills,
		"handlers cut by a kill", k.cut, "rate per key", rate, "busiest second of one key", busiest,
		"keys that reached the rate", atRate, "keys above it", over)
}

func keyTurnsOnCluster(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	rdb := c.Client(t)
	const ns, queue = "keyturncluster", "turns"
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	spreadShards(t, c, b, queue)
	if err := b.SetKeyFairness(ctx, queue, true); err != nil {
		t.Fatal(err)
	}
	typ := job.New[crashArgs]("fault.turn", job.Queue(queue))
	var envs []*job.Envelope
	for i := range 600 {
		e, err := typ.Envelope(crashArgs{N: i}, job.ID(fmt.Sprintf("A-%03d", i)), job.Key("A"))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := b.Enqueue(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	envs = envs[:0]
	for i := range 6 {
		e, err := typ.Envelope(crashArgs{N: i}, job.ID(fmt.Sprintf("B-%d", i)), job.Key("B"))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := b.Enqueue(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	if st, err := testkit.OneStats(b.Stats(ctx, queue)); err != nil || !st.FairKeys || st.HeldByKey != 606 {
		t.Fatalf("stats %+v, %v; want the turns on and 606 jobs waiting for them", st, err)
	}
	// 10 a shard: each shard's B jobs (about 2) and the rest of A's.
	seen := map[string]bool{}
	for _, sh := range testkit.Shards(t, b, queue) {
		res, err := testkit.Drive(b).ClaimShard(ctx, sh, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			seen[j.ID] = true
		}
	}
	for i := range 6 {
		if id := fmt.Sprintf("B-%d", i); !seen[id] {
			t.Errorf("%s not claimed by the first claim of each shard (claimed %d jobs)", id, len(seen))
		}
	}
	// Weights: C of weight 3 joins the turns behind A on every shard; a
	// claim of 8 deals A 2 and C 6 (the room over the weights, 4, times
	// each key's weight).
	if err := b.SetKeyWeight(ctx, queue, "C", 3); err != nil {
		t.Fatal(err)
	}
	envs = envs[:0]
	for i := range 60 {
		e, err := typ.Envelope(crashArgs{N: i}, job.ID(fmt.Sprintf("C-%02d", i)), job.Key("C"))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := b.Enqueue(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	for i, sh := range testkit.Shards(t, b, queue) {
		held := sh.Keys().Held
		if n := rdb.ZCard(ctx, held+"#C").Val(); n < 6 {
			t.Fatalf("shard %d holds %d of C's jobs; the test needs 6", i, n)
		}
		if w := rdb.HGet(ctx, strings.TrimSuffix(held, "held:")+"keyweights", "C").Val(); w != "3" {
			t.Errorf("shard %d: C's weight %q, want 3", i, w)
		}
		res, err := testkit.Drive(b).ClaimShard(ctx, sh, 8, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]int{}
		for _, j := range res.Jobs {
			by[j.ID[:1]]++
		}
		if by["A"] != 2 || by["C"] != 6 || len(by) != 2 {
			t.Errorf("shard %d: a claim of 8 with C of weight 3 took %v by key, want A 2 and C 6", i, by)
		}
	}
	if err := b.SetKeyFairness(ctx, queue, false); err != nil {
		t.Fatal(err)
	}
	if err := b.SetKeyWeight(ctx, queue, "C", 1); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Masters(t) {
		node := m.Client(t)
		if left := redistest.Keys(t, node, ns+":{*}:held:*"); len(left) > 0 {
			t.Errorf("master %s holds %v after the turns were turned off", m.Addr(), left)
		}
		if left := redistest.Keys(t, node, ns+":{*}:keyturn"); len(left) > 0 {
			t.Errorf("master %s holds %v after the turns were turned off", m.Addr(), left)
		}
		if left := redistest.Keys(t, node, ns+":{*}:keyweights"); len(left) > 0 {
			t.Errorf("master %s holds %v after C's weight went back to 1", m.Addr(), left)
		}
	}
	summary(t, "jobs", 666, "shards", 3, "masters", 3, "jobs of B claimed in the first claims", 6, "weighted claims of 8 split 2:6", 3)
}

func debounceOnCluster(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	rdb := c.Client(t)
	clk := clock.NewSimulated(time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC))
	const ns, queue, keys, enqueues, window = "debouncecluster", "digests", 20, 50, time.Second
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	spreadShards(t, c, b, queue)
	type digest struct {
		N int `json:"n"`
	}
	typ := job.New[digest]("fault.digest", job.Queue(queue))
	last := map[string]time.Time{} // key -> ready time of its last enqueue
	for i := 1; i <= enqueues; i++ {
		for k := range keys {
			key := fmt.Sprintf("user-%02d", k)
			e, err := typ.Enqueue(ctx, b, digest{N: i}, job.Debounce(key, window))
			if err != nil {
				t.Fatalf("enqueue %d of %s: %v", i, key, err)
			}
			if want := clk.Now().Add(window); e.ID != key || !e.ReadyAt.Equal(want) {
				t.Fatalf("enqueue %d of %s: id %q, ready %v; want %s, ready %v", i, key, e.ID, e.ReadyAt, key, want)
			}
			last[key] = e.ReadyAt
		}
		clk.Advance(10 * time.Millisecond)
	}
	// One job per key, in its key's shard, with the last arguments.
	perShard := 0
	for _, sh := range testkit.Shards(t, b, queue) {
		n, err := rdb.ZCard(ctx, sh.Keys().Scheduled).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			perShard++
		}
	}
	if st, err := testkit.OneStats(b.Stats(ctx, queue)); err != nil || st.Scheduled != keys {
		t.Fatalf("stats %+v, %v; want %d jobs scheduled", st, err, keys)
	}
	if perShard < 2 {
		t.Errorf("the %d keys' jobs are in %d shard(s): the run does not cross slots", keys, perShard)
	}
	// The last round's enqueues were all at one instant of the clock.
	end := clk.Now().Add(-10 * time.Millisecond).Add(window)
	for key, ready := range last {
		info, err := b.Job(ctx, queue, key)
		if err != nil || info.State != job.StateScheduled || !ready.Equal(end) || !info.ReadyAt.Equal(end) || string(info.Envelope.Payload) != fmt.Sprintf(`{"n":%d}`, enqueues) {
			t.Fatalf("job %s: %+v, %v (last enqueue ready %v); want scheduled at %v with n %d", key, info, err, ready, end, enqueues)
		}
	}
	// Due one window after the last enqueue, not before.
	clk.Advance(end.Add(-time.Millisecond).Sub(clk.Now()))
	if res, err := testkit.Drive(b).Claim(ctx, queue, 100, time.Minute); err != nil || len(res.Jobs) != 0 {
		t.Fatalf("claimed %d jobs before the window closed (%v)", len(res.Jobs), err)
	}
	clk.Advance(end.Sub(clk.Now()))
	res, err := testkit.Drive(b).Claim(ctx, queue, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, j := range res.Jobs {
		if _, ok := last[j.ID]; !ok || seen[j.ID] || string(j.Envelope.Payload) != fmt.Sprintf(`{"n":%d}`, enqueues) {
			t.Errorf("claimed %s with %s: want each key once with n %d", j.ID, j.Envelope.Payload, enqueues)
		}
		seen[j.ID] = true
		if err := testkit.Drive(b).Ack(ctx, j.Lease); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != keys {
		t.Errorf("claimed %d keys' jobs once the window closed, want %d", len(seen), keys)
	}
	if res, err := testkit.Drive(b).Claim(ctx, queue, 100, time.Minute); err != nil || len(res.Jobs) != 0 {
		t.Errorf("claimed %d jobs again (%v)", len(res.Jobs), err)
	}
	summary(t, "keys", keys, "enqueues per key", enqueues, "shards", 3, "shards holding jobs", perShard, "jobs run", len(seen))
}
