package shardtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// deadCap is the cap of TestDeadCapIsPerQueue: a multiple of 3, below
// what each of the 3 shards receives, so that every shard fills its share.
const deadCap = 12

// TestDeadCapIsPerQueue checks that Options.DeadCap bounds a queue, not
// each shard: seeded with the cap in force, both sides keep deadCap
// records; trimming to a lower cap (the broker's DeadTrim, delayq dead
// trim) and killing more jobs keep them at the cap. Which records remain
// differs by design (each shard keeps the newest of its share, see
// docs/scaling.md), so the answers compared are the counts, and each side
// is checked against its own rule.
func TestDeadCapIsPerQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newPair(t, seedOptions{deadCap: deadCap})
	counts := func(t *testing.T, e *env) any {
		st, err := testkit.OneStats(e.b.Stats(ctx, orders))
		_, ids := walkDead(t, e.b, orders, protocol.DeadCursor{}, 1000)
		n, errCount := e.dl.Count(ctx, orders, filters(e.base)["none"])
		return map[string]any{"stats": st.Dead, "err": errOut(err), "listed": len(ids), "count": n, "countErr": errOut(errCount)}
	}
	// keeps checks that side e keeps, of the records died, the newest
	// cap of the queue (1 shard) or of each shard's share (3 shards).
	keeps := func(t *testing.T, e *env, died []string, cap int) {
		t.Helper()
		_, kept := walkDead(t, e.b, orders, protocol.DeadCursor{}, 1000)
		shards := testkit.Shards(t, e.b, orders)
		q := map[int][]string{}
		for _, id := range died { // oldest first
			k := keyspace.Route(shards, id).Index()
			q[k] = append(q[k], id)
		}
		var want []string
		for k, ids := range q {
			share := cap
			if len(shards) > 1 {
				share = cap / len(shards) // cap is a multiple of the count
			}
			if len(ids) < share {
				t.Fatalf("%s: shard %d received %d dead jobs, fewer than its share %d", e.name, k, len(ids), share)
			}
			want = append(want, ids[len(ids)-share:]...)
		}
		slices.Sort(kept)
		slices.Sort(want)
		if !slices.Equal(kept, want) {
			t.Errorf("%s: keeps %v, want %v", e.name, kept, want)
		}
	}
	// Dead ids in the order they died (pairs share a millisecond: the
	// lower id sorts older).
	var died []string
	for i := range nDead {
		died = append(died, deadID(i))
	}
	step := func(name string, cap int, change question) {
		t.Run(name, func(t *testing.T) {
			if change != nil {
				same(t, p, pinnedClock, change)
			}
			got := same(t, p, pinnedClock, counts)
			if n := got[0].(map[string]any)["stats"]; n != int64(cap) {
				t.Errorf("%s keeps %v dead records, want %d", p.sides[0].name, n, cap)
			}
			for _, s := range p.sides {
				keeps(t, s.in(pinnedClock), died, cap)
			}
		})
	}
	step("seeded", deadCap, nil)
	for i := range 6 {
		died = append(died, fmt.Sprintf("late-%d", i))
	}
	step("more die", deadCap, func(t *testing.T, e *env) any {
		d := testkit.Drive(e.seed)
		shards := testkit.Shards(t, e.seed, orders)
		var out []any
		for i := range 6 {
			id := fmt.Sprintf("late-%d", i)
			e.set(-4*time.Second + time.Duration(i)*time.Millisecond)
			if err := e.seed.Enqueue(ctx, envelope(e.side, orders, id, i, e.base.Add(-time.Hour))); err != nil {
				t.Fatal(err)
			}
			// Its shard's earliest due job: claim that shard alone.
			res, err := d.ClaimShard(ctx, keyspace.Route(shards, id), 1, lease)
			if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != id {
				t.Fatalf("%s: claim %s: %+v, %v", e.name, id, res.Jobs, err)
			}
			died := &job.DeadRecord{Type: res.Jobs[0].Envelope.Type, Body: res.Jobs[0].Body, Error: "late", Attempts: 1}
			if _, err := d.Kill(ctx, res.Jobs[0].Lease, died); err != nil {
				t.Fatal(err)
			}
			out = append(out, died.DiedAt)
		}
		return out
	})
	step("DeadTrim to a lower cap", 6, func(t *testing.T, e *env) any {
		b := testkit.NewBroker(t, e.rdb, broker.Options{Namespace: e.ns, DeadCap: 6})
		protocol.UseClock(b, e.pinnedNow)
		n, err := deadletter.New(b).Trim(ctx, orders)
		return []any{n, errOut(err)}
	})
	step("delayq dead trim --cap", 3, run("dead", "trim", "-q", orders, "--cap", "3", "--max-age", "720h", "--json"))
}

// TestDeadCapSharesPerShard pins down where a sharded queue's answer
// legitimately differs: each shard trims to its fixed share of DeadCap
// (docs/scaling.md), so with the cap at the queue's own count of records,
// a shard that received more than its share drops its oldest, while the
// unsharded queue drops none.
func TestDeadCapSharesPerShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newPair(t, seedOptions{})
	for _, s := range p.sides {
		b := testkit.NewBroker(t, s.rdb, broker.Options{Namespace: s.ns, DeadCap: nDead})
		protocol.UseClock(b, s.pinnedNow)
		shards := testkit.Shards(t, b, orders)
		per := make([]int, len(shards))
		for i := range nDead {
			per[keyspace.Route(shards, deadID(i)).Index()]++
		}
		want := int64(0)
		for k, n := range per {
			share := nDead / len(shards)
			if k < nDead%len(shards) {
				share++
			}
			want += int64(max(n-share, 0))
		}
		if len(shards) > 1 && want == 0 {
			t.Fatalf("%s: dead records per shard %v fill no shard beyond its share: the seed shows nothing", s.name, per)
		}
		n, err := deadletter.New(b).Trim(ctx, orders)
		if err != nil || n != want {
			t.Errorf("%s (dead records per shard %v): DeadTrim with DeadCap %d = %d, %v; want %d", s.name, per, nDead, n, err, want)
		}
	}
}
