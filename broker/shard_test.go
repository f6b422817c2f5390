package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// sharded declares queue "q" with n shards on the bundle's broker.
func (tb *testBundle) sharded(t *testing.T, n int) []admin.Shard {
	t.Helper()
	if err := tb.b.DeclareQueue(tb.ctx, "q", n); err != nil {
		t.Fatal(err)
	}
	shards, err := protocol.Admin(tb.b).Shards(tb.ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != n {
		t.Fatalf("Shards = %v, want %d", shards, n)
	}
	return shards
}

// shardOf returns the index of the shard whose key set holds id, or -1.
func (tb *testBundle) shardOf(t *testing.T, shards []admin.Shard, set, id string) int {
	t.Helper()
	found := -1
	for i, s := range shards {
		_, err := tb.rdb.ZScore(tb.ctx, tb.key(s.Name, set), id).Result()
		switch {
		case err == nil && found >= 0:
			t.Fatalf("job %q is in shards %d and %d", id, found, i)
		case err == nil:
			found = i
		case !errors.Is(err, redis.Nil):
			t.Fatal(err)
		}
	}
	return found
}

func TestShardedQueueSpreadsAndClaimsEveryJobOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	shards := tb.sharded(t, 4)
	const n = 400
	var envs []*job.Envelope
	for i := range n {
		envs = append(envs, env("j"+strconv.Itoa(i), 0))
	}
	tb.enqueue(t, envs...)
	for _, e := range envs {
		if e.Queue != "q" {
			t.Fatalf("enqueued envelope has queue %q, want the logical q", e.Queue)
		}
	}
	for i, s := range shards {
		if got, want := s.Name[:3], "q#"+strconv.Itoa(i); got != want {
			t.Fatalf("shard %d is named %q, want a name starting %q", i, s.Name, want)
		}
		c, err := tb.rdb.ZCard(tb.ctx, tb.key(s.Name, "scheduled")).Result()
		if err != nil {
			t.Fatal(err)
		}
		// FNV-1a over 400 ids: each of 4 shards gets 100 ± a few dozen.
		if c < 60 || c > 140 {
			t.Errorf("shard %s holds %d of %d jobs", s.Name, c, n)
		}
	}
	if ks := redistest.Keys(t, tb.rdb, tb.ns+":{q}:*"); len(ks) != 0 {
		t.Fatalf("a sharded queue wrote keys under the queue's own tag: %v", ks)
	}

	seen := map[string]bool{}
	for {
		res := tb.claim(t, 37)
		if len(res.Jobs) == 0 {
			if !res.Next.IsZero() {
				t.Fatalf("empty sharded queue has Next %v", res.Next)
			}
			break
		}
		var leases []protocol.Lease
		for _, c := range res.Jobs {
			if seen[c.ID] {
				t.Fatalf("job %s claimed twice", c.ID)
			}
			seen[c.ID] = true
			if c.Queue() != "q" || c.Envelope.Queue != "q" {
				t.Fatalf("claimed job has lease queue %q and envelope queue %q, want q", c.Queue(), c.Envelope.Queue)
			}
			leases = append(leases, c.Lease)
		}
		if err := testkit.Drive(tb.b).Ack(tb.ctx, leases...); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != n {
		t.Fatalf("claimed %d jobs, want %d", len(seen), n)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Scheduled+st.Processing+st.Dead != 0 {
		t.Fatalf("stats after acking everything: %+v, %v", st, err)
	}
}

func TestShardedJobOperationsFindTheirShard(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.sharded(t, 5)
	var envs []*job.Envelope
	for i := range 20 {
		envs = append(envs, env("j"+strconv.Itoa(i), time.Minute))
	}
	tb.enqueue(t, envs...)

	// Duplicate ids are found in their shard.
	err := tb.b.Enqueue(tb.ctx, env("j3", 0), env("new", 0), env("j17", 0))
	var be *job.BatchError
	if !errors.As(err, &be) || !errors.Is(be.Errs[0], broker.ErrDuplicate) || be.Errs[1] != nil || !errors.Is(be.Errs[2], broker.ErrDuplicate) {
		t.Fatalf("enqueue with duplicates: %v", err)
	}
	if !strings.Contains(be.Errs[0].Error(), `queue "q"`) {
		t.Fatalf("duplicate error %q does not name the queue q", be.Errs[0])
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "j5"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "j5"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("second cancel: %v", err)
	}
	at, err := tb.b.Reschedule(tb.ctx, "q", "j9", epoch)
	if err != nil || !at.Equal(epoch) {
		t.Fatalf("reschedule = %v, %v", at, err)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Queue != "q" || st.Scheduled != 20 || st.Due != 2 || !st.OldestDue.Equal(epoch) || !st.NextReady.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("stats %+v", st)
	}
	res := tb.claim(t, 10)
	if got := ids(res.Jobs); !slices.Equal(sorted(got), []string{"j9", "new"}) {
		t.Fatalf("claimed %v, want the rescheduled j9 and new", got)
	}
	if _, err := tb.b.Reschedule(tb.ctx, "q", "j9", time.Time{}); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("reschedule in progress: %v", err)
	}
	// Retry and Kill go to the job's shard by its lease.
	c := res.Jobs[0]
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, c.Lease, time.Second, c.Envelope); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Drive(tb.b).Kill(tb.ctx, res.Jobs[1].Lease, &job.DeadRecord{Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(time.Second)
	again := tb.claim(t, 10)
	if len(again.Jobs) != 1 || again.Jobs[0].ID != c.ID || again.Jobs[0].Attempt != 2 {
		t.Fatalf("after retry: %v", ids(again.Jobs))
	}
	tb.clock.Advance(time.Minute)
	reaped, err := testkit.Drive(tb.b).Reap(tb.ctx, "q", 10)
	if err != nil || len(reaped.Jobs) != 1 || reaped.Jobs[0].Queue() != "q" || reaped.Jobs[0].ID != c.ID {
		t.Fatalf("reap = %+v, %v", reaped, err)
	}
	if _, err := testkit.Drive(tb.b).KillExpired(tb.ctx, reaped.Jobs[0].Lease, &job.DeadRecord{Error: "expired"}); err != nil {
		t.Fatal(err)
	}
	rec, err := deadletter.New(tb.b).Get(tb.ctx, "q", c.ID)
	if err != nil || rec.Queue != "q" || rec.Error != "expired" {
		t.Fatalf("dead record %+v, %v", rec, err)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestDeadPagePagesThroughShards(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 3} {
		t.Run(strconv.Itoa(shards)+" shards", func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			tb.sharded(t, shards)
			const n = 23
			var envs []*job.Envelope
			for i := range n {
				envs = append(envs, env(fmt.Sprintf("d%02d", i), 0))
			}
			tb.enqueue(t, envs...)
			// Two jobs die per simulated millisecond, so that pages must
			// order by died-at and then by id, across shards.
			for i, c := range tb.claim(t, n).Jobs {
				if i%2 == 0 {
					tb.clock.Advance(time.Millisecond)
				}
				if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Error: "e" + c.ID}); err != nil {
					t.Fatal(err)
				}
			}
			for _, limit := range []int{1, 4, n, 100} {
				var got []*job.DeadRecord
				var cur protocol.DeadCursor
				for pages := 0; ; pages++ {
					page, next, err := protocol.Dead(tb.b).Page(tb.ctx, "q", cur, limit)
					if err != nil {
						t.Fatal(err)
					}
					if len(page) > limit || pages > n {
						t.Fatalf("limit %d: page of %d records, or too many pages", limit, len(page))
					}
					got = append(got, page...)
					if next.IsZero() {
						break
					}
					cur = next
				}
				if len(got) != n {
					t.Fatalf("limit %d: paged %d dead records, want %d", limit, len(got), n)
				}
				for i := 1; i < len(got); i++ {
					a, b := got[i-1], got[i]
					if a.DiedAt.Before(b.DiedAt) || (a.DiedAt.Equal(b.DiedAt) && a.ID <= b.ID) {
						t.Fatalf("limit %d: records %d and %d out of order: %s@%v then %s@%v", limit, i-1, i, a.ID, a.DiedAt, b.ID, b.DiedAt)
					}
					if a.Queue != "q" {
						t.Fatalf("record %s has queue %q", a.ID, a.Queue)
					}
				}
			}
		})
	}
}

// TestDeadPageWithoutRecords checks that a page with no records is an
// empty list, not nil, whatever the shard count: callers that encode it
// (JSON) see [] in both cases.
func TestDeadPageWithoutRecords(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 3} {
		t.Run(strconv.Itoa(shards)+" shards", func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			tb.sharded(t, shards)
			tb.enqueue(t, env("a", 0))
			c := tb.claim(t, 1).Jobs[0]
			if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Error: "e"}); err != nil {
				t.Fatal(err)
			}
			for _, cur := range []protocol.DeadCursor{{DiedAt: epoch.Add(-time.Hour), ID: "z"}, {}} {
				if cur.IsZero() {
					if _, err := deadletter.New(tb.b).DeleteAll(tb.ctx, "q", deadletter.Filter{}, deadletter.BulkOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				recs, next, err := protocol.Dead(tb.b).Page(tb.ctx, "q", cur, 10)
				if err != nil || recs == nil || len(recs) != 0 || !next.IsZero() {
					t.Fatalf("DeadPage after %+v = %#v, %+v, %v; want an empty list, no next page", cur, recs, next, err)
				}
			}
		})
	}
}

func TestShardedDeadLetters(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.sharded(t, 3)
	const n = 12
	var envs []*job.Envelope
	for i := range n {
		envs = append(envs, env(fmt.Sprintf("d%02d", i), 0))
	}
	tb.enqueue(t, envs...)
	for _, c := range tb.claim(t, n).Jobs {
		if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Error: "e" + c.ID}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Dead != n {
		t.Fatalf("stats %+v, %v; want %d dead", st, err, n)
	}
	err = deadletter.New(tb.b).Redrive(tb.ctx, "q", 0, "d01", "nope", "d02", "d03")
	var be *job.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], broker.ErrNotFound) || be.Errs[2] != nil || be.Errs[3] != nil {
		t.Fatalf("redrive across shards: %v", err)
	}
	if err := deadletter.New(tb.b).Redrive(tb.ctx, "q", 0, "nope"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("redrive of one missing id: %v", err)
	}
	if err := deadletter.New(tb.b).Redrive(tb.ctx, "q", 0); err != nil {
		t.Fatalf("redrive of no ids: %v", err)
	}
	if again := tb.claim(t, 10); !slices.Equal(sorted(ids(again.Jobs)), []string{"d01", "d02", "d03"}) {
		t.Fatalf("claimed %v after redrive", ids(again.Jobs))
	}
	if err := deadletter.New(tb.b).Delete(tb.ctx, "q", "d04", "d05", "d01"); err == nil {
		t.Fatal("deleting a redriven record succeeded")
	} else if !errors.As(err, &be) || be.Errs[0] != nil || be.Errs[1] != nil || !errors.Is(be.Errs[2], broker.ErrNotFound) {
		t.Fatalf("dead delete: %v", err)
	}
	if dropped, err := deadletter.New(tb.b).Trim(tb.ctx, "q"); err != nil || dropped != 0 {
		t.Fatalf("trim = %d, %v", dropped, err)
	}
	if purged, err := deadletter.New(tb.b).DeleteAll(tb.ctx, "q", deadletter.Filter{}, deadletter.BulkOptions{}); err != nil || purged.Done != n-5 {
		t.Fatalf("purge = %+v, %v; want %d", purged, err, n-5)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Dead != 0 {
		t.Fatalf("stats after purge %+v, %v", st, err)
	}
}

func TestDeclareQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, n := range []int{0, -1, broker.MaxShards + 1} {
		if err := tb.b.DeclareQueue(tb.ctx, "q", n); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), strconv.Itoa(n)+" shards") {
			t.Fatalf("DeclareQueue(q, %d): %v", n, err)
		}
	}
	if err := tb.b.DeclareQueue(tb.ctx, "q#1", 2); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("DeclareQueue with '#': %v", err)
	}
	if keys := redistest.Keys(t, tb.rdb, tb.ns+":*"); len(keys) != 0 {
		t.Fatalf("bad declarations wrote keys %v", keys)
	}

	if err := tb.b.DeclareQueue(tb.ctx, "q", 3); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.DeclareQueue(tb.ctx, "q", 3); err != nil {
		t.Fatalf("declaring the same count again: %v", err)
	}
	if err := tb.b.DeclareQueue(tb.ctx, "q", 4); !errors.Is(err, broker.ErrShardCount) || !strings.Contains(err.Error(), "has 3 shard(s), not 4") {
		t.Fatalf("changing the count: %v", err)
	}
	qs, err := protocol.Admin(tb.b).Queues(tb.ctx)
	if err != nil || !slices.Equal(qs, []string{"q"}) {
		t.Fatalf("Queues = %v, %v; want the declared q", qs, err)
	}

	// Another broker (another process) reads the count and agrees.
	other, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(other, tb.clock.Now)
	if err := other.Enqueue(tb.ctx, env("x", 0)); err != nil {
		t.Fatal(err)
	}
	if res := tb.claim(t, 1); len(res.Jobs) != 1 || res.Jobs[0].ID != "x" {
		t.Fatalf("claimed %v, want the job the other broker enqueued", ids(res.Jobs))
	}
	if err := other.DeclareQueue(tb.ctx, "q", 1); !errors.Is(err, broker.ErrShardCount) {
		t.Fatalf("other broker unsharding q: %v", err)
	}

	// A queue used undeclared has one shard for good.
	e := env("y", 0)
	e.Queue = "plain"
	tb.enqueue(t, e)
	if err := other.DeclareQueue(tb.ctx, "plain", 2); !errors.Is(err, broker.ErrShardCount) {
		t.Fatalf("sharding a used queue: %v", err)
	}
	if err := other.DeclareQueue(tb.ctx, "plain", 1); err != nil {
		t.Fatalf("declaring the count it has: %v", err)
	}

	// Jobs stored before declarations existed (no count in Redis) keep a
	// queue from being sharded.
	e = env("z", 0)
	e.Queue = "legacy"
	tb.enqueue(t, e)
	if err := tb.rdb.HDel(tb.ctx, tb.ns+":shards", "legacy").Err(); err != nil {
		t.Fatal(err)
	}
	fresh, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.DeclareQueue(tb.ctx, "legacy", 2); !errors.Is(err, broker.ErrShardCount) || !strings.Contains(err.Error(), "unsharded jobs") {
		t.Fatalf("sharding a queue with legacy jobs: %v", err)
	}
	if n, _ := tb.rdb.HExists(tb.ctx, tb.ns+":shards", "legacy").Result(); n {
		t.Fatal("the refused declaration was stored")
	}
}

func TestShardWakeupReachesQueueSubscribers(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.sharded(t, 3)
	notices, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
	defer stop()
	redistest.WaitFor(t, 5*time.Second, "subscription", func() bool {
		n, _ := tb.rdb.PubSubNumSub(tb.ctx, tb.key("q", "wake")).Result()
		return n[tb.key("q", "wake")] == 1
	})
	// Ids that land on different shards each wake the queue's subscribers.
	for i, id := range []string{"a", "b", "c", "d", "e", "f"} {
		tb.enqueue(t, env(id, time.Duration(10-i)*time.Minute))
		expectNotice(t, notices, true)
	}
}

func TestShardNamesSpreadOverTheSlotSpace(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, n := range []int{2, 3, 6, 16, broker.MaxShards} {
		q := "s" + strconv.Itoa(n)
		if err := tb.b.DeclareQueue(tb.ctx, q, n); err != nil {
			t.Fatal(err)
		}
		shards, err := protocol.Admin(tb.b).Shards(tb.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for k, s := range shards {
			if seen[s.Name] || !strings.HasPrefix(s.Name, q+"#"+strconv.Itoa(k)) {
				t.Fatalf("%d shards: shard %d named %q", n, k, s.Name)
			}
			seen[s.Name] = true
			if want := redistest.Slot("{" + s.Name + "}"); s.Slot != want {
				t.Fatalf("shard %s: Slot %d, CRC16 says %d", s.Name, s.Slot, want)
			}
			if lo, hi := k*16384/n, (k+1)*16384/n; s.Slot < lo || s.Slot >= hi {
				t.Fatalf("%d shards: shard %d has slot %d, outside [%d, %d)", n, k, s.Slot, lo, hi)
			}
		}
	}
}

func TestDurableNeedsReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t)
	rdb := master.Client(t)
	b, err := broker.New(rdb, broker.Options{WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// No replica: the job is stored, but Enqueue says it is not safe, and
	// so does a second try (the duplicate is not confirmed either).
	for range 2 {
		if err := b.Enqueue(ctx, env("a", 0)); !errors.Is(err, broker.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replica(s)") {
			t.Fatalf("enqueue without replica: %v", err)
		}
	}
	if ok, _ := rdb.HExists(ctx, "delayq:{q}:jobs", "a").Result(); !ok {
		t.Fatal("the unconfirmed job is not stored on the master")
	}
	if _, err := testkit.OneStats(b.Stats(ctx, "q")); err != nil {
		t.Fatalf("stats waits for replicas: %v", err)
	}

	port := master.Addr()[strings.LastIndexByte(master.Addr(), ':')+1:]
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", port)
	redistest.WaitFor(t, 10*time.Second, "replica in sync", func() bool {
		info, _ := rdb.Info(ctx, "replication").Result()
		return strings.Contains(info, "state=online")
	})
	// While the replica confirms nothing, not even a duplicate is reported
	// as stored: the pipeline's no-op write must reach the replica first.
	replica.Pause()
	if err := b.Enqueue(ctx, env("a", 0)); !errors.Is(err, broker.ErrNotReplicated) {
		t.Fatalf("duplicate while the replica is paused: %v", err)
	}
	replica.Resume()
	// A generous timeout now: a busy machine may take more than 100ms.
	b, err = broker.New(rdb, broker.Options{WaitReplicas: 1, WaitTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(ctx, env("a", 0)); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("enqueue again with a replica: %v", err)
	}
	if err := b.Enqueue(ctx, env("b", 0)); err != nil {
		t.Fatal(err)
	}
	res, err := testkit.Drive(b).Claim(ctx, "q", 10, time.Minute)
	if err != nil || len(res.Jobs) != 2 {
		t.Fatalf("claim = %v, %v", ids(res.Jobs), err)
	}
	if err := testkit.Drive(b).Ack(ctx, res.Jobs[0].Lease, res.Jobs[1].Lease); err != nil {
		t.Fatal(err)
	}
	// A script the server has not seen is loaded through the same pipeline.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(ctx, env("c", 0)); err != nil {
		t.Fatalf("enqueue after SCRIPT FLUSH: %v", err)
	}
	if _, err := broker.New(rdb, broker.Options{WaitReplicas: -1}); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("negative WaitReplicas: %v", err)
	}
}

// Every reader of a queue sees a sharded queue whole: the same answers as
// for an unsharded queue holding the same jobs.
func TestShardedQueueReaders(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d shards", n), func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			tb.sharded(t, n)
			for i := range 7 {
				tb.enqueue(t, env("j"+strconv.Itoa(i), time.Duration(i)*time.Second))
			}
			// Job finds each, in its shard.
			for i := range 7 {
				j, err := tb.b.Job(tb.ctx, "q", "j"+strconv.Itoa(i))
				if err != nil || j.State != job.StateScheduled || j.Queue != "q" {
					t.Fatalf("Job(j%d) = %+v, %v", i, j, err)
				}
			}
			// ScheduledPage lists all 7 in ready-time order, over pages.
			var listed []string
			cur := ""
			for {
				page, err := tb.b.ScheduledPage(tb.ctx, "q", cur, 3)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range page.Jobs {
					listed = append(listed, j.ID)
				}
				if page.Next == "" {
					break
				}
				cur = page.Next
			}
			if want := []string{"j0", "j1", "j2", "j3", "j4", "j5", "j6"}; !slices.Equal(listed, want) {
				t.Fatalf("ScheduledPage listed %v, want %v", listed, want)
			}
			// RescheduleAfter finds a scheduled job in its shard.
			if _, err := tb.b.RescheduleAfter(tb.ctx, "q", "j6", 0); err != nil {
				t.Fatal(err)
			}
			st, err := tb.b.Stats(tb.ctx, "q")
			if err != nil || st[0].Scheduled != 7 || st[0].Due != 2 {
				t.Fatalf("Stats = %+v, %v; want 7 scheduled, 2 due", st, err)
			}
			// A claim and an ack show in ProcessingPage and History.
			claimed := tb.claim(t, 2)
			if len(claimed.Jobs) != 2 {
				t.Fatalf("claimed %v, want j0 and j6", ids(claimed.Jobs))
			}
			page, err := tb.b.ProcessingPage(tb.ctx, "q", "", 10)
			if err != nil || len(page.Jobs) != 2 {
				t.Fatalf("ProcessingPage = %d jobs, %v; want 2", len(page.Jobs), err)
			}
			if err := testkit.Drive(tb.b).Ack(tb.ctx, claimed.Jobs[0].Lease); err != nil {
				t.Fatal(err)
			}
			hist, err := tb.b.History(tb.ctx, []string{"q"}, epoch, epoch)
			if err != nil || hist[0][0].Claimed != 2 || hist[0][0].Done != 1 {
				t.Fatalf("History = %+v, %v; want 2 claimed, 1 done", hist, err)
			}
		})
	}
}

// DeadCap is the queue's, sharded or not: 20 jobs killed with a cap of 3
// leave 3 dead records, the newest.
func TestDeadCapIsPerQueue(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%d shards", n), func(t *testing.T) {
			t.Parallel()
			tb := setup(t, func(o *broker.Options) { o.DeadCap = 3 })
			tb.sharded(t, n)
			for i := range 20 {
				tb.enqueue(t, env(fmt.Sprintf("d%02d", i), 0))
			}
			for _, c := range tb.claim(t, 20).Jobs {
				tb.clock.Advance(time.Millisecond)
				testkit.Kill(t, tb.b, c, "boom")
			}
			recs, _, err := protocol.Dead(tb.b).Page(tb.ctx, "q", protocol.DeadCursor{}, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) > 3 {
				t.Fatalf("%d shards keep %d dead records, want at most 3", n, len(recs))
			}
			if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); st.Dead != int64(len(recs)) {
				t.Fatalf("Stats.Dead = %d, DeadPage has %d", st.Dead, len(recs))
			}
		})
	}
}
