package broker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestPauseKeyHoldsItsJobs: a paused key's due jobs are held by the claim
// (pending, no attempt spent, cancellable) while the other keys' jobs and
// the unkeyed ones are claimed; a resume sends them back with their ready
// times and wakes the workers, and the next claim takes them in order.
func TestPauseKeyHoldsItsJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 3 {
		all = append(all, keyed(fmt.Sprintf("a.%d", i), "a"), keyed(fmt.Sprintf("b.%d", i), "b"), env(fmt.Sprintf("plain%d", i), 0))
		tb.clock.Advance(time.Millisecond)
	}
	tb.enqueue(t, all...)
	ready := map[string]time.Time{}
	for _, e := range all {
		info, err := tb.b.Job(tb.ctx, "q", e.ID)
		if err != nil {
			t.Fatal(err)
		}
		ready[e.ID] = info.ReadyAt
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "a"); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "a"); err != nil { // idempotent
		t.Fatal(err)
	}
	tb.clock.Advance(time.Second)
	got := byKey(claimAll(t, tb))
	if got["a"] != 0 || got["b"] != 3 || got[""] != 3 {
		t.Fatalf("with a paused claimed %v, want b's 3 and the 3 unkeyed", got)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Held != 3 || st.HeldByKey != 3 || st.Paused || len(st.PausedTypes) != 0 {
		t.Fatalf("stats %+v, %v; want a's 3 held by their key", st, err)
	}
	info, err := tb.b.Job(tb.ctx, "q", "a.2")
	if err != nil || info.State != job.StateScheduled || info.Attempts != 0 {
		t.Fatalf("held a.2: %+v, %v", info, err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "a.2"); err != nil {
		t.Fatalf("cancel of a paused key's job: %v", err)
	}
	// A new job of a is held too; resuming b (not paused) moves nothing.
	tb.enqueue(t, keyed("a.3", "a"))
	if got := byKey(claimAll(t, tb)); len(got) != 0 {
		t.Fatalf("claimed %v, want nothing", got)
	}
	if n, err := tb.b.ResumeKey(tb.ctx, "q", "b"); err != nil || n != 0 {
		t.Fatalf("resume of a key not paused: %d, %v", n, err)
	}
	wake, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
	defer stop()
	n, err := tb.b.ResumeKey(tb.ctx, "q", "a")
	if err != nil || n != 3 {
		t.Fatalf("resume: %d back, %v; want 3", n, err)
	}
	expectNotice(t, wake, true)
	res := tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "a.0,a.1,a.3" {
		t.Fatalf("after the resume claimed %s, want a.0,a.1,a.3 in order", got)
	}
	for _, c := range res.Jobs {
		if c.Attempt != 1 || (ready[c.ID] != time.Time{} && !c.ReadyAt.Equal(ready[c.ID])) {
			t.Errorf("%s: attempt %d ready %v, want attempt 1 ready %v", c.ID, c.Attempt, c.ReadyAt, ready[c.ID])
		}
	}
	for _, name := range []string{"keypaused", "keyheld"} {
		if n, err := tb.rdb.Exists(tb.ctx, keyKey(tb, name)).Result(); err != nil || n != 0 {
			t.Errorf("%s left after the resume: %d, %v", name, n, err)
		}
	}
	if f, err := tb.rdb.HExists(tb.ctx, tb.key("q", "controls"), "kp").Result(); err != nil || f {
		t.Errorf("controls still say a key is paused: %v, %v", f, err)
	}
}

// TestPauseKeyWithCap: a key both capped and paused. While paused, a job
// of it that ends frees its slot and sends nothing to run; after the
// resume the key is held by its cap again (one at a time), and the rest
// stay held by the cap.
func TestPauseKeyWithCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 4 {
		all = append(all, keyed(fmt.Sprintf("a.%d", i), "a"))
	}
	tb.enqueue(t, all...)
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 1); err != nil {
		t.Fatal(err)
	}
	first := claimAll(t, tb)
	if got := ids(first); !slices.Equal(got, []string{"a.0"}) {
		t.Fatalf("cap 1: claimed %v", got)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "a"); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, first[0].Lease); err != nil {
		t.Fatal(err)
	}
	if got := ids(claimAll(t, tb)); len(got) != 0 {
		t.Fatalf("paused with a free slot: claimed %v", got)
	}
	if n, err := tb.rdb.HExists(tb.ctx, keyKey(tb, "keyrun"), "a").Result(); err != nil || n {
		t.Fatalf("a slot of a is still taken after its job ended: %v, %v", n, err)
	}
	n, err := tb.b.ResumeKey(tb.ctx, "q", "a")
	if err != nil || n != 3 {
		t.Fatalf("resume: %d, %v; want 3 back", n, err)
	}
	res := claimAll(t, tb)
	if got := ids(res); !slices.Equal(got, []string{"a.1"}) {
		t.Fatalf("after the resume claimed %v, want a.1 alone (the cap of 1)", got)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.HeldByKey != 2 {
		t.Fatalf("stats %+v, %v; want 2 held by the cap", st, err)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res[0].Lease); err != nil {
		t.Fatal(err)
	}
	if got := ids(claimAll(t, tb)); !slices.Equal(got, []string{"a.2"}) {
		t.Fatalf("after an ack claimed %v, want a.2", got)
	}
}

// TestPauseKeyShards: on a queue of 2 shards a key's pause holds its jobs
// on both, and its resume sends back those of both.
func TestPauseKeyShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	shards := tb.sharded(t, 2)
	var all []*job.Envelope
	for i := range 20 {
		all = append(all, keyed(fmt.Sprintf("a.%02d", i), "a"), keyed(fmt.Sprintf("b.%02d", i), "b"))
	}
	tb.enqueue(t, all...)
	on := map[int]int{}
	for _, e := range all {
		if strings.HasPrefix(e.ID, "a.") {
			on[tb.shardOf(t, shards, "scheduled", e.ID)]++
		}
	}
	if on[0] == 0 || on[1] == 0 {
		t.Fatalf("a's jobs on shards %v; the test needs both", on)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "a"); err != nil {
		t.Fatal(err)
	}
	claimShards := func() map[string]int {
		var claimed []protocol.Claimed
		for _, s := range testkit.Shards(t, tb.b, "q") {
			for range 2 {
				res, err := testkit.Drive(tb.b).ClaimShard(tb.ctx, s, 50, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				claimed = append(claimed, res.Jobs...)
			}
		}
		return byKey(claimed)
	}
	if got := claimShards(); got["a"] != 0 || got["b"] != 20 {
		t.Fatalf("a paused on 2 shards: claimed %v", got)
	}
	for i, s := range testkit.Shards(t, tb.b, "q") {
		held := strings.TrimSuffix(s.Keys().Held, "held:")
		if n := tb.rdb.ZCard(tb.ctx, s.Keys().Held+"#a").Val(); int(n) != on[i] {
			t.Errorf("shard %d holds %d of a, want %d", i, n, on[i])
		}
		if !tb.rdb.HExists(tb.ctx, held+"keypaused", "a").Val() {
			t.Errorf("shard %d: a not paused", i)
		}
	}
	n, err := tb.b.ResumeKey(tb.ctx, "q", "a")
	if err != nil || n != 20 {
		t.Fatalf("resume: %d, %v; want 20 back", n, err)
	}
	if got := claimShards(); got["a"] != 20 {
		t.Fatalf("after the resume claimed %v, want a's 20", got)
	}
}

// TestPauseKeyReapedLeaseFreesSlot: a running job of a capped key whose
// worker dies while the key is paused: the reaper ends its lease and its
// slot comes back (the job's retry waits for the resume like the rest),
// so after the resume the key runs up to its cap, and no slot is left
// taken once everything ended.
func TestPauseKeyReapedLeaseFreesSlot(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, keyed("a.1", "a"), keyed("a.2", "a"), keyed("a.3", "a"))
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "a", 2); err != nil {
		t.Fatal(err)
	}
	first := tb.claim(t, 10)
	if got := strings.Join(ids(first.Jobs), ","); got != "a.1,a.2" {
		t.Fatalf("claimed %v", got)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "a"); err != nil {
		t.Fatal(err)
	}
	// The worker dies; its leases run out and the reaper retries them at
	// once.
	tb.clock.Advance(11 * time.Second)
	drv := testkit.Drive(tb.b)
	reaped, err := drv.Reap(tb.ctx, "q", 10)
	if err != nil || len(reaped.Jobs) != 2 {
		t.Fatalf("reaped %+v, %v", reaped, err)
	}
	for _, r := range reaped.Jobs {
		if _, err := drv.RetryExpired(tb.ctx, r.Lease, 0, r.Envelope); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := tb.rdb.HExists(tb.ctx, keyKey(tb, "keyrun"), "a").Result(); err != nil || n {
		t.Fatalf("a's slots still taken after the reaper: %v, %v", n, err)
	}
	if got := ids(claimAll(t, tb)); len(got) != 0 {
		t.Fatalf("paused: claimed %v", got)
	}
	if n, err := tb.b.ResumeKey(tb.ctx, "q", "a"); err != nil || n != 3 {
		t.Fatalf("resume: %d, %v; want 3 back", n, err)
	}
	res := claimAll(t, tb)
	if len(res) != 2 {
		t.Fatalf("after the resume claimed %v, want 2 (the cap)", ids(res))
	}
	if n, err := tb.rdb.HGet(tb.ctx, keyKey(tb, "keyrun"), "a").Result(); err != nil || n != "2" {
		t.Fatalf("running count of a: %q, %v; want 2", n, err)
	}
	for _, c := range res {
		if err := drv.Ack(tb.ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
	}
	last := claimAll(t, tb)
	if len(last) != 1 {
		t.Fatalf("claimed %v, want the last job", ids(last))
	}
	if err := drv.Ack(tb.ctx, last[0].Lease); err != nil {
		t.Fatal(err)
	}
	if n, err := tb.rdb.Exists(tb.ctx, keyKey(tb, "keyheld")).Result(); err != nil || n != 0 {
		t.Fatalf("after every job ended keyheld left (%d, %v)", n, err)
	}
	if run := tb.jobFields(t, keyKey(tb, "keyrun")); len(run) != 0 {
		t.Fatalf("after every job ended keyrun holds %v", run)
	}
}

// TestPauseKeyDebounce: a debounced job of a paused key, held once due,
// takes a later debounced enqueue's arguments and keeps its ready time
// and its place (held, one job); the resume runs it once, with the last
// arguments.
func TestPauseKeyDebounce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const window = time.Minute
	enq := func(n int) (*job.Envelope, error) {
		return noticeType.Enqueue(tb.ctx, tb.b, notice{N: n}, job.Debounce("d", window), job.Key("r"))
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "r"); err != nil {
		t.Fatal(err)
	}
	first, err := enq(1)
	if err != nil {
		t.Fatal(err)
	}
	// Within the window: the ready time moves on.
	tb.clock.Advance(window / 2)
	second, err := enq(2)
	if err != nil || !second.ReadyAt.Equal(first.ReadyAt.Add(window/2)) {
		t.Fatalf("debounce in the window: ready %v, %v", second.ReadyAt, err)
	}
	tb.clock.Advance(window + time.Second)
	if got := ids(claimAll(t, tb)); len(got) != 0 {
		t.Fatalf("key paused: claimed %v", got)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.HeldByKey != 1 || st.Scheduled != 0 {
		t.Fatalf("stats %+v, %v; want d held by its key", st, err)
	}
	third, err := enq(3)
	if err != nil || !third.ReadyAt.Equal(second.ReadyAt) {
		t.Fatalf("debounce of the held job: ready %v, %v; want %v kept", third.ReadyAt, err, second.ReadyAt)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.HeldByKey != 1 || st.Scheduled != 0 || tb.storedJobs(t) != 1 {
		t.Fatalf("stats %+v, %v; want d still held, one job", st, err)
	}
	if n, err := tb.b.ResumeKey(tb.ctx, "q", "r"); err != nil || n != 1 {
		t.Fatalf("resume: %d, %v", n, err)
	}
	res := claimAll(t, tb)
	if len(res) != 1 || res[0].ID != "d" || string(res[0].Envelope.Payload) != `{"n":3}` || !res[0].ReadyAt.Equal(second.ReadyAt) {
		t.Fatalf("after the resume claimed %+v, want d once with n 3", res)
	}
}

// TestPauseKeyBadInput: bad input is refused naming what was wrong, and
// nothing changes; a queue not used yet is placed and paused, so its
// first jobs of the key are held.
func TestPauseKeyBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, keyed("a.1", "a"))
	if err := tb.b.PauseKey(tb.ctx, "q", "b"); err != nil {
		t.Fatal(err)
	}
	snap := func() map[string]string {
		out := map[string]string{}
		for _, k := range []string{tb.key("q", "controls"), keyKey(tb, "keypaused")} {
			m, err := tb.rdb.HGetAll(tb.ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			for f, v := range m {
				out[k+" "+f] = v
			}
		}
		return out
	}
	before := snap()
	for name, c := range map[string]struct {
		call func() error
		says string
	}{
		"empty key":         {func() error { return tb.b.PauseKey(tb.ctx, "q", "") }, "key is empty"},
		"empty key resumed": {func() error { _, err := tb.b.ResumeKey(tb.ctx, "q", ""); return err }, "key is empty"},
		"bad key":           {func() error { return tb.b.PauseKey(tb.ctx, "q", "a b") }, `key "a b"`},
		"hash in key":       {func() error { _, err := tb.b.ResumeKey(tb.ctx, "q", "b#c"); return err }, `key "b#c"`},
		"long key":          {func() error { return tb.b.PauseKey(tb.ctx, "q", strings.Repeat("k", 129)) }, "129 bytes"},
		"bad queue":         {func() error { return tb.b.PauseKey(tb.ctx, "q q", "a") }, "queue"},
	} {
		if err := c.call(); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, c.says)
		}
	}
	if after := snap(); !maps.Equal(before, after) {
		t.Fatalf("bad input changed the controls: %v -> %v", before, after)
	}
	if got := ids(tb.claim(t, 10).Jobs); !slices.Equal(got, []string{"a.1"}) {
		t.Fatalf("claimed %v, want a.1 (a is not paused)", got)
	}
	// A queue not used yet, sharded by default: its first jobs of the
	// key are held.
	if err := tb.b.PauseKey(tb.ctx, "fresh", "a"); err != nil {
		t.Fatal(err)
	}
	e := keyed("fresh.1", "a")
	e.Queue = "fresh"
	tb.enqueue(t, e)
	if res, err := testkit.Drive(tb.b).Claim(tb.ctx, "fresh", 10, 10*time.Second); err != nil || len(res.Jobs) != 0 {
		t.Fatalf("fresh queue with a paused: claimed %v, %v", ids(res.Jobs), err)
	}
	if n, err := tb.b.ResumeKey(tb.ctx, "fresh", "a"); err != nil || n != 1 {
		t.Fatalf("resume in the fresh queue: %d, %v", n, err)
	}
}

// TestResumeKeyWakesWorkers: a worker whose claims hold a paused key's
// due jobs sleeps (its MaxIdle is a minute) while the other key's job
// runs; ResumeKey's wake-up notice has it run the held jobs within a
// second.
func TestResumeKeyWakesWorkers(t *testing.T) {
	t.Parallel()
	bd := testkit.Setup(t)
	typ := job.New[notice]("import.row", job.Queue("imports"))
	var mu sync.Mutex
	ran := map[string]time.Time{}
	typ.Handle(bd.Reg, func(_ context.Context, j *job.Job[notice]) error {
		mu.Lock()
		defer mu.Unlock()
		ran[j.ID] = time.Now()
		return nil
	})
	runAt := func(id string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := ran[id]
		return at, ok
	}
	if err := bd.B.PauseKey(bd.Ctx, "imports", "acme"); err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"acme", "acme", "acme", "beta"} {
		if _, err := typ.Enqueue(bd.Ctx, bd.B, notice{N: i}, job.ID(fmt.Sprintf("%s.%d", key, i)), job.Key(key)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := bd.Config(t)
	cfg.MaxIdle = time.Minute
	testkit.StartWorker(t, cfg)
	redistest.WaitFor(t, 10*time.Second, "beta's job, and acme's held", func() bool {
		_, ok := runAt("beta.3")
		st, err := testkit.OneStats(bd.B.Stats(bd.Ctx, "imports"))
		return ok && err == nil && st.HeldByKey == 3
	})
	for i := range 3 {
		if _, ok := runAt(fmt.Sprintf("acme.%d", i)); ok {
			t.Fatalf("acme.%d ran while acme was paused", i)
		}
	}
	resumed := time.Now()
	if n, err := bd.B.ResumeKey(bd.Ctx, "imports", "acme"); err != nil || n != 3 {
		t.Fatalf("resume: %d, %v", n, err)
	}
	redistest.WaitFor(t, 10*time.Second, "acme's jobs after the resume", func() bool {
		for i := range 3 {
			if _, ok := runAt(fmt.Sprintf("acme.%d", i)); !ok {
				return false
			}
		}
		return true
	})
	for i := range 3 {
		if at, _ := runAt(fmt.Sprintf("acme.%d", i)); at.Sub(resumed) > time.Second {
			t.Errorf("acme.%d ran %v after the resume, want within a second", i, at.Sub(resumed))
		}
	}
}
