package broker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// keyKey is one of the per-key caps' keys of queue q: keyrun, keycaps or
// keyheld, beside its controls.
func keyKey(tb *testBundle, name string) string {
	return strings.TrimSuffix(tb.key("q", "controls"), "controls") + name
}

// keyed is env with a flow-control key.
func keyed(id, key string) *job.Envelope {
	e := env(id, 0)
	e.Key = key
	return e
}

// byKey counts claimed jobs per key (their id is "<key>.<n>"; unkeyed
// jobs count under "").
func byKey(cs []protocol.Claimed) map[string]int {
	out := map[string]int{}
	for _, c := range cs {
		k, _, ok := strings.Cut(c.ID, ".")
		if !ok {
			k = ""
		}
		out[k]++
	}
	return out
}

// TestKeyConcurrencyCap: with a default cap of 2 per key, 20 keys of 5 due
// jobs each and 10 jobs without a key, the claims lease 2 of each key and
// every unkeyed job; the rest are held (pending, no attempt spent,
// cancellable); an ack moves one held job of its key back and wakes the
// workers.
func TestKeyConcurrencyCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 5 {
		for k := range 20 {
			all = append(all, keyed(fmt.Sprintf("k%02d.%d", k, i), fmt.Sprintf("k%02d", k)))
		}
		all = append(all, env(fmt.Sprintf("plain%d", i), 0), env(fmt.Sprintf("plain%d", i+5), 0))
	}
	tb.enqueue(t, all...)
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 2); err != nil {
		t.Fatal(err)
	}
	// Held jobs take their place in a claim's n: claim until one takes
	// nothing.
	var claimed []protocol.Claimed
	for range 30 {
		res := tb.claim(t, 7)
		claimed = append(claimed, res.Jobs...)
	}
	got := byKey(claimed)
	for k := range 20 {
		if n := got[fmt.Sprintf("k%02d", k)]; n != 2 {
			t.Errorf("key k%02d: %d running, want its cap 2", k, n)
		}
	}
	if got[""] != 10 || len(claimed) != 50 {
		t.Fatalf("claimed %d (%d unkeyed), want 40 keyed and 10 unkeyed", len(claimed), got[""])
	}
	// The rest are held, counted in Stats.Held; the key cap is no pause.
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Held != 60 || st.HeldByKey != 60 || len(st.HeldByCap) != 0 || st.Scheduled != 0 || len(st.PausedTypes) != 0 {
		t.Fatalf("stats %+v, %v; want 60 held", st, err)
	}
	// The held: pending, scheduled as far as users see, no attempt spent.
	info, err := tb.b.Job(tb.ctx, "q", "k03.4")
	if err != nil || info.State != job.StateScheduled || info.Attempts != 0 || info.Envelope.Key != "k03" {
		t.Fatalf("held job: %+v, %v", info, err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "k03.4"); err != nil {
		t.Fatalf("cancel of a held job: %v", err)
	}
	if _, err := tb.b.Reschedule(tb.ctx, "q", "k03.3", time.Time{}); err != nil {
		t.Fatalf("reschedule of a held job: %v", err)
	}
	repl := keyed("k07.4", "k07")
	repl.Replace, repl.Payload = true, []byte(`{"n":2}`)
	tb.enqueue(t, repl)
	if info, err := tb.b.Job(tb.ctx, "q", "k07.4"); err != nil || string(info.Envelope.Payload) != `{"n":2}` || info.State != job.StateScheduled {
		t.Fatalf("replace of a held job: %+v, %v", info, err)
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("at every key's cap claimed %v", ids(res.Jobs))
	}
	// One job of k05 ends: one of its held jobs comes back, and only it.
	wake, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
	defer stop()
	var k05 protocol.Lease
	for _, c := range claimed {
		if strings.HasPrefix(c.ID, "k05.") {
			k05 = c.Lease
		}
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, k05); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up notice after a keyed job ended")
	}
	res := tb.claim(t, 10)
	if len(res.Jobs) != 1 || !strings.HasPrefix(res.Jobs[0].ID, "k05.") || res.Jobs[0].Attempt != 1 {
		t.Fatalf("after an ack of k05 claimed %+v, want one job of k05 on its first attempt", res.Jobs)
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("k05 at its cap again, claimed %v", ids(res.Jobs))
	}
	// A new job without a key is claimed past the held ones.
	tb.enqueue(t, env("late", 0))
	if res := tb.claim(t, 10); strings.Join(ids(res.Jobs), ",") != "late" {
		t.Fatalf("claimed %v, want the unkeyed job", ids(res.Jobs))
	}
}

// TestKeyConcurrencyOverrides: a key's own cap wins over the default; with
// no default only the keys with their own cap are capped; clearing a
// key's cap leaves it to the default.
func TestKeyConcurrencyOverrides(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 12 {
		for _, k := range []string{"premium", "basic", "free"} {
			all = append(all, keyed(fmt.Sprintf("%s.%02d", k, i), k))
		}
	}
	tb.enqueue(t, all...)
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "premium", 10); err != nil {
		t.Fatal(err)
	}
	// Only premium is capped.
	got := byKey(claimAll(t, tb))
	if got["premium"] != 10 || got["basic"] != 12 || got["free"] != 12 {
		t.Fatalf("claimed %v with only premium capped at 10", got)
	}

	tb2 := setup(t)
	tb2.enqueue(t, all...)
	for _, c := range []struct {
		key string
		n   int
	}{{"", 2}, {"premium", 10}} {
		if err := tb2.b.SetKeyConcurrency(tb2.ctx, "q", c.key, c.n); err != nil {
			t.Fatal(err)
		}
	}
	first := claimAll(t, tb2)
	if got := byKey(first); got["premium"] != 10 || got["basic"] != 2 || got["free"] != 2 {
		t.Fatalf("claimed %v, want premium 10, the rest 2", got)
	}
	// premium's own cap cleared: the default (2) applies; its 10 running
	// jobs hold it above that until 9 end.
	if err := tb2.b.SetKeyConcurrency(tb2.ctx, "q", "premium", 0); err != nil {
		t.Fatal(err)
	}
	if res := claimAll(t, tb2); len(res) != 0 {
		t.Fatalf("premium back under the default with 10 running: claimed %v", ids(res))
	}
	var prem []protocol.Lease
	for _, c := range first {
		if strings.HasPrefix(c.ID, "premium.") {
			prem = append(prem, c.Lease)
		}
	}
	if err := testkit.Drive(tb2.b).Ack(tb2.ctx, prem[:9]...); err != nil {
		t.Fatal(err)
	}
	if got := byKey(claimAll(t, tb2)); got["premium"] != 1 || len(got) != 1 {
		t.Fatalf("after 9 of premium ended claimed %v, want 1 of premium (1 running, default 2)", got)
	}
}

// TestKeyConcurrencyChangeReleasesHeld: raising, and clearing, a key's
// cap or the default sends the held jobs back to the schedule at once and
// wakes the workers; the next claims take what the new cap allows.
func TestKeyConcurrencyChangeReleasesHeld(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 6 {
		all = append(all, keyed(fmt.Sprintf("a.%d", i), "a"), keyed(fmt.Sprintf("b.%d", i), "b"))
	}
	tb.enqueue(t, all...)
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 1); err != nil {
		t.Fatal(err)
	}
	if got := byKey(claimAll(t, tb)); got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("cap 1: claimed %v", got)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Scheduled != 0 || st.Held != 10 {
		t.Fatalf("want 10 held, none scheduled: %+v, %v", st, err)
	}
	wake, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
	defer stop()
	// a's own cap raised to 3: two more of a, none of b.
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "a", 3); err != nil {
		t.Fatal(err)
	}
	expectNotice(t, wake, true)
	if got := byKey(claimAll(t, tb)); got["a"] != 2 || got["b"] != 0 {
		t.Fatalf("a raised to 3: claimed %v, want 2 more of a", got)
	}
	// The default raised to 2: one more of b.
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 2); err != nil {
		t.Fatal(err)
	}
	expectNotice(t, wake, true)
	if got := byKey(claimAll(t, tb)); got["a"] != 0 || got["b"] != 1 {
		t.Fatalf("default raised to 2: claimed %v, want 1 more of b", got)
	}
	// Both cleared: everything left runs.
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "a", 0); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 0); err != nil {
		t.Fatal(err)
	}
	if got := byKey(claimAll(t, tb)); got["a"] != 3 || got["b"] != 4 {
		t.Fatalf("caps cleared: claimed %v, want the 3 of a and 4 of b left", got)
	}
	if n, err := tb.rdb.HLen(tb.ctx, tb.key("q", "controls")).Result(); err != nil || n != 0 {
		t.Fatalf("controls after clearing: %d fields, %v", n, err)
	}
}

// TestKeyConcurrencyReapedLeaseFreesSlot: a crashed worker's job holds its
// key's slot until its lease runs out and the reaper ends it (a retry):
// then a held job of the key comes back and is claimed.
func TestKeyConcurrencyReapedLeaseFreesSlot(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, keyed("a.1", "a"), keyed("a.2", "a"), keyed("a.3", "a"))
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "a", 2); err != nil {
		t.Fatal(err)
	}
	first := tb.claim(t, 10)
	if strings.Join(ids(first.Jobs), ",") != "a.1,a.2" {
		t.Fatalf("claimed %v", ids(first.Jobs))
	}
	// The worker dies. Before the lease ends nothing more runs.
	tb.clock.Advance(5 * time.Second)
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("with both slots held claimed %v", ids(res.Jobs))
	}
	tb.clock.Advance(6 * time.Second)
	drv := testkit.Drive(tb.b)
	reaped, err := drv.Reap(tb.ctx, "q", 10)
	if err != nil || len(reaped.Jobs) != 2 {
		t.Fatalf("reaped %+v, %v", reaped, err)
	}
	if _, err := drv.RetryExpired(tb.ctx, reaped.Jobs[0].Lease, time.Minute, reaped.Jobs[0].Envelope); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 10)
	if strings.Join(ids(res.Jobs), ",") != "a.3" {
		t.Fatalf("after the reaper ended one lease claimed %v, want the held a.3", ids(res.Jobs))
	}
	if n, err := tb.rdb.HGet(tb.ctx, keyKey(tb, "keyrun"), "a").Result(); err != nil || n != "2" {
		t.Fatalf("running count of a: %q, %v; want 2", n, err)
	}
	// The other expired lease and the rest end: no slot is left taken.
	if _, err := drv.RetryExpired(tb.ctx, reaped.Jobs[1].Lease, time.Minute, reaped.Jobs[1].Envelope); err != nil {
		t.Fatal(err)
	}
	if err := drv.Ack(tb.ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	if n, err := tb.rdb.Exists(tb.ctx, keyKey(tb, "keyheld")).Result(); err != nil || n != 0 {
		t.Fatalf("after every lease ended keyheld left (%d, %v)", n, err)
	}
	if run := tb.jobFields(t, keyKey(tb, "keyrun")); len(run) != 0 {
		t.Fatalf("after every lease ended keyrun holds %v", run)
	}
}

// TestKeyConcurrencyOrphanFreesSlot: a keyed job whose body another
// program deleted while it ran (an orphan lease, which no settle ends)
// gives its key's slot back when the reaper removes it.
func TestKeyConcurrencyOrphanFreesSlot(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, keyed("a.1", "a"), keyed("a.2", "a"))
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 1); err != nil {
		t.Fatal(err)
	}
	if got := ids(tb.claim(t, 10).Jobs); !slices.Equal(got, []string{"a.1"}) {
		t.Fatalf("claimed %v", got)
	}
	if err := tb.rdb.HDel(tb.ctx, tb.key("q", "jobs"), "a.1").Err(); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(11 * time.Second)
	reaped, err := testkit.Drive(tb.b).Reap(tb.ctx, "q", 10)
	if err != nil || !slices.Equal(reaped.Orphans, []string{"a.1"}) {
		t.Fatalf("reaped %+v, %v; want the orphan a.1", reaped, err)
	}
	if got := ids(tb.claim(t, 10).Jobs); !slices.Equal(got, []string{"a.2"}) {
		t.Fatalf("after the orphan was reaped claimed %v, want the held a.2", got)
	}
	if n, err := tb.rdb.HGet(tb.ctx, keyKey(tb, "keyrun"), "a").Result(); err != nil || n != "1" {
		t.Fatalf("running count of a: %q, %v; want 1", n, err)
	}
}

// TestKeyConcurrencyShards: a sharded queue splits a key's cap among its
// shards (n below the shard count is refused), and no key runs more than
// its cap over all shards.
func TestKeyConcurrencyShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.DeclareQueue(tb.ctx, "q", 3); err != nil {
		t.Fatal(err)
	}
	var all []*job.Envelope
	for i := range 30 {
		for _, k := range []string{"a", "b", "c", "d"} {
			all = append(all, keyed(fmt.Sprintf("%s.%02d", k, i), k))
		}
	}
	tb.enqueue(t, all...)
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 2); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "3 shards") {
		t.Fatalf("cap below the shard count: %v", err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 4); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "d", 3); err != nil {
		t.Fatal(err)
	}
	var claimed []protocol.Claimed
	for _, s := range testkit.Shards(t, tb.b, "q") {
		for range 3 {
			res, err := testkit.Drive(tb.b).ClaimShard(tb.ctx, s, 50, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			claimed = append(claimed, res.Jobs...)
		}
	}
	got := byKey(claimed)
	// 30 jobs of a key over 3 shards: every shard has enough of each key
	// to fill its share (2, 1, 1 of 4; 1, 1, 1 of 3).
	if got["a"] != 4 || got["b"] != 4 || got["c"] != 4 || got["d"] != 3 {
		t.Fatalf("claimed per key %v over 3 shards, want 4 each and 3 of d", got)
	}
}

// TestKeyConcurrencyBadInput: bad input is refused naming what was wrong,
// and nothing changes.
func TestKeyConcurrencyBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, keyed("a.1", "a"), keyed("a.2", "a"))
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 1); err != nil {
		t.Fatal(err)
	}
	before, err := tb.rdb.HGetAll(tb.ctx, tb.key("q", "controls")).Result()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		call func() error
		says string
	}{
		"negative":     {func() error { return tb.b.SetKeyConcurrency(tb.ctx, "q", "", -1) }, "negative"},
		"key negative": {func() error { return tb.b.SetKeyConcurrency(tb.ctx, "q", "a", -2) }, "negative"},
		"bad key":      {func() error { return tb.b.SetKeyConcurrency(tb.ctx, "q", "a b", 3) }, `key "a b"`},
		"hash in key":  {func() error { return tb.b.SetKeyConcurrency(tb.ctx, "q", "a#b", 3) }, `key "a#b"`},
		"long key":     {func() error { return tb.b.SetKeyConcurrency(tb.ctx, "q", strings.Repeat("k", 129), 3) }, "129 bytes"},
		"bad queue":    {func() error { return tb.b.SetKeyConcurrency(tb.ctx, "q q", "", 3) }, "queue"},
	} {
		if err := c.call(); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, c.says)
		}
	}
	after, err := tb.rdb.HGetAll(tb.ctx, tb.key("q", "controls")).Result()
	if err != nil || !maps.Equal(before, after) {
		t.Fatalf("controls changed: %v -> %v, %v", before, after, err)
	}
	if n, err := tb.rdb.Exists(tb.ctx, keyKey(tb, "keycaps")).Result(); err != nil || n != 0 {
		t.Fatalf("keycaps written: %d, %v", n, err)
	}
	if got := ids(tb.claim(t, 10).Jobs); !slices.Equal(got, []string{"a.1"}) {
		t.Fatalf("claimed %v, want a.1 under the cap of 1 still", got)
	}
}

// TestPlainClaimAndSettleCostUnchanged counts the commands the server runs
// for a claim and an ack of a job without a key in a queue without key
// caps: the same as before keys existed. It also counts a claim and an
// ack of keyed jobs under a key cap, the figures of
// docs/flow-control.md#per-key-caps.
func TestPlainClaimAndSettleCostUnchanged(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	// A simulated clock that stands still: the claims' lateness, and so
	// their history writes, are the same every run.
	clk := clock.NewSimulated(epoch)
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	plain := job.New[notice]("plain", job.Queue("q"))
	drv := testkit.Drive(b)
	// Warm up: the queue is known, the scripts loaded.
	if _, err := plain.Enqueue(ctx, b, notice{N: 0}); err != nil {
		t.Fatal(err)
	}
	res, err := drv.Claim(ctx, "q", 1, time.Minute)
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	if err := drv.Ack(ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	count := func(f func() error) map[string]int { t.Helper(); return commandsOf(t, ctx, rdb, f) }
	claimAck := func(typ *job.Type[notice], opts ...job.Option) (claim, ack map[string]int) {
		t.Helper()
		if _, err := typ.Enqueue(ctx, b, notice{N: 1}, opts...); err != nil {
			t.Fatal(err)
		}
		var lease protocol.Lease
		claim = count(func() error {
			res, err := drv.Claim(ctx, "q", 1, time.Minute)
			if err == nil && len(res.Jobs) != 1 {
				err = fmt.Errorf("claimed %d", len(res.Jobs))
			}
			if err == nil {
				lease = res.Jobs[0].Lease
			}
			return err
		})
		ack = count(func() error { return drv.Ack(ctx, lease) })
		return claim, ack
	}
	// The commands of a claim and an ack of one job without a key in a
	// queue without controls, as counted before keys existed (and the two
	// HSETNX of the claim that keep the lease hashes in their hashtable
	// encoding, keyspace.EncodingField).
	wantClaim := map[string]int{"evalsha": 1, "hget": 2, "hgetall": 1, "get": 1, "zrangebyscore": 1, "zrem": 1, "hmget": 2,
		"incrby": 1, "zadd": 1, "hset": 3, "hsetnx": 2, "pexpire": 1, "hincrby": 2, "expire": 1, "zrange": 1, "type": 7}
	wantAck := map[string]int{"evalsha": 1, "hget": 1, "exists": 1, "hmget": 1, "zrem": 1, "hdel": 3, "hincrby": 1, "expire": 1,
		"hset": 1, "pexpire": 1, "type": 8}
	claim, ack := claimAck(plain)
	if !maps.Equal(claim, wantClaim) || !maps.Equal(ack, wantAck) {
		t.Fatalf("a plain claim ran %v, want %v;\nits ack ran %v, want %v", claim, wantClaim, ack, wantAck)
	}
	// A keyed job in a queue without key caps costs the same.
	claim, ack = claimAck(plain, job.Key("a"))
	if !maps.Equal(claim, wantClaim) || !maps.Equal(ack, wantAck) {
		t.Fatalf("a keyed claim without key caps ran %v;\nits ack ran %v", claim, ack)
	}
	// With a key cap: what a claim and an ack of a keyed job add.
	if err := b.SetKeyConcurrency(ctx, "q", "", 2); err != nil {
		t.Fatal(err)
	}
	claim, ack = claimAck(plain, job.Key("a"))
	t.Logf("under a key cap: claim %v (%d commands), ack %v (%d commands)", claim, total(claim), ack, total(ack))
	t.Logf("plain: claim %d commands, ack %d commands", total(wantClaim), total(wantAck))
	if claim["hmget"] != wantClaim["hmget"]+2 || ack["hmget"] != wantAck["hmget"]+2 || ack["zmscore"] != 1 || ack["zpopmin"] != 0 {
		t.Fatalf("under a key cap: claim %v, ack %v", claim, ack)
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
