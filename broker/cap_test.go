package broker_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

func TestQueueConcurrencyCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for i := range 6 {
		tb.enqueue(t, env(fmt.Sprintf("j%d", i), 0))
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "", 2); err != nil {
		t.Fatal(err)
	}
	first := tb.claim(t, 10)
	if len(first.Jobs) != 2 {
		t.Fatalf("claimed %d under a cap of 2", len(first.Jobs))
	}
	// At the cap: nothing more, and the workers are told to come back when
	// the first lease could run out.
	res := tb.claim(t, 10)
	if len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(10*time.Second)) {
		t.Fatalf("at the cap: claimed %v, next %v; want none until the first lease deadline", ids(res.Jobs), res.Next.Sub(epoch))
	}
	// An ack frees a slot and wakes the queue's workers.
	wake, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
	defer stop()
	if err := testkit.Drive(tb.b).Ack(tb.ctx, first.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up notice after a capped job ended")
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 1 {
		t.Fatalf("after one ack claimed %d, want the freed slot", len(res.Jobs))
	}
	// A lease that runs out (a crashed worker) gives its slot back.
	tb.clock.Advance(11 * time.Second)
	if res := tb.claim(t, 10); len(res.Jobs) != 2 {
		t.Fatalf("after the leases ran out claimed %d, want 2", len(res.Jobs))
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Caps[""] != 2 {
		t.Fatalf("stats %+v, %v; want cap 2 shown", st, err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "", 0); err != nil {
		t.Fatal(err)
	}
	if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); len(st.Caps) != 0 {
		t.Fatalf("cleared cap still shown: %v", st.Caps)
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 1 {
		t.Fatalf("without the cap claimed %d, want the last due job", len(res.Jobs))
	}
}

func TestTypeConcurrencyCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	rep := func(id string) *job.Envelope { e := env(id, 0); e.Type = "report.build"; return e }
	tb.enqueue(t, rep("r1"), rep("r2"), env("m1", 0), rep("r3"), env("m2", 0), rep("r4"), rep("r5"))
	if err := tb.b.SetConcurrency(tb.ctx, "q", "report.build", 2); err != nil {
		t.Fatal(err)
	}
	first := tb.claim(t, 10)
	// (Jobs due at the same ms come in id order.)
	if got := strings.Join(ids(first.Jobs), ","); got != "m1,m2,r1,r2" {
		t.Fatalf("claimed %q, want two reports and every other job", got)
	}
	r1, r2 := first.Jobs[2].Lease, first.Jobs[3].Lease
	// The others are held aside, pending, with no attempt spent.
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Held != 3 || st.Scheduled != 0 || st.Caps["report.build"] != 2 || len(st.HeldByCap) != 1 || st.HeldByCap["report.build"] != 3 {
		t.Fatalf("stats %+v, %v; want 3 held, all of report.build", st, err)
	}
	info, err := tb.b.Job(tb.ctx, "q", "r3")
	if err != nil || info.State != job.StateScheduled || info.Attempts != 0 {
		t.Fatalf("held job: %+v, %v", info, err)
	}
	// More jobs of other types are claimed past the held ones.
	tb.enqueue(t, env("m3", 0))
	if res := tb.claim(t, 10); strings.Join(ids(res.Jobs), ",") != "m3" {
		t.Fatalf("at the type's cap claimed %v, want only m3", ids(res.Jobs))
	}
	// A held job can be cancelled and rescheduled like a scheduled one.
	if _, err := tb.b.Cancel(tb.ctx, "q", "r5"); err != nil {
		t.Fatalf("cancel of a held job: %v", err)
	}
	if _, err := tb.b.Job(tb.ctx, "q", "r5"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("cancelled held job still found: %v", err)
	}
	// One report ends: the next claim sees the room and puts the earliest
	// held job back first in line (with its ready time), the one after
	// takes it.
	drv := testkit.Drive(tb.b)
	if err := drv.Ack(tb.ctx, r1); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 10)
	if len(res.Jobs) == 0 {
		res = tb.claim(t, 10)
	}
	if got := strings.Join(ids(res.Jobs), ","); got != "r3" {
		t.Fatalf("after one report ended claimed %q, want r3", got)
	}
	if res.Jobs[0].Attempt != 1 || !res.Jobs[0].ReadyAt.Equal(epoch) {
		t.Fatalf("r3 attempt %d ready %v; want its first attempt at its own ready time", res.Jobs[0].Attempt, res.Jobs[0].ReadyAt)
	}
	// Every way a lease ends frees the slot: a retry, a release.
	if _, err := drv.Retry(tb.ctx, r2, time.Hour, rep("r2")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(claimAll(t, tb)), ","); got != "r4" {
		t.Fatalf("after a retry claimed %q, want r4", got)
	}
	if err := drv.Release(tb.ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(claimAll(t, tb)), ","); got != "r3" {
		t.Fatalf("after a release claimed %q, want r3 again", got)
	}
	// Raising the cap frees held jobs at once; clearing it too.
	tb.enqueue(t, rep("r6"), rep("r7"))
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("at the cap claimed %v", ids(res.Jobs))
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "report.build", 3); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(claimAll(t, tb)), ","); got != "r6" {
		t.Fatalf("after raising the cap claimed %q, want r6", got)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "report.build", 0); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(claimAll(t, tb)), ","); got != "r7" {
		t.Fatalf("after clearing the cap claimed %q, want r7", got)
	}
	if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); st.Held != 0 || len(st.Caps) != 0 {
		t.Fatalf("after clearing: %+v", st)
	}
}

// claimAll claims until a claim takes nothing, and returns what was claimed.
func claimAll(t *testing.T, tb *testBundle) []protocol.Claimed {
	t.Helper()
	var all []protocol.Claimed
	for range 5 {
		res := tb.claim(t, 10)
		if len(res.Jobs) == 0 && (res.Next.IsZero() || res.Next.After(res.Now)) {
			return all
		}
		all = append(all, res.Jobs...)
	}
	return all
}

func TestConcurrencyCapShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.DeclareQueue(tb.ctx, "q", 3); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		tb.enqueue(t, env(fmt.Sprintf("j%d", i), 0))
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "", 2); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "3 shards") {
		t.Fatalf("cap below the shard count: %v", err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "", 5); err != nil {
		t.Fatal(err)
	}
	// Each shard gets its share: 2, 2 and 1.
	var got []int
	for _, s := range testkit.Shards(t, tb.b, "q") {
		res, err := testkit.Drive(tb.b).ClaimShard(tb.ctx, s, 10, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, len(res.Jobs))
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2, 2}) {
		t.Fatalf("claimed per shard %v, want shares 1, 2, 2", got)
	}
	if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); st.Caps[""] != 5 || st.Processing != 5 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConcurrencyBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	if err := tb.b.SetConcurrency(tb.ctx, "q", "", 4); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"negative":   func() error { return tb.b.SetConcurrency(tb.ctx, "q", "", -1) },
		"bad type":   func() error { return tb.b.SetConcurrency(tb.ctx, "q", "bad type", 1) },
		"bad queue":  func() error { return tb.b.SetConcurrency(tb.ctx, "", "", 1) },
		"type, neg.": func() error { return tb.b.SetConcurrency(tb.ctx, "q", "t", -3) },
	} {
		if err := call(); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// Nothing changed: the cap of 4 stands, the job is still there.
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Caps[""] != 4 || len(st.Caps) != 1 || st.Scheduled != 1 {
		t.Fatalf("after bad input: %+v, %v", st, err)
	}
}

// TestHeldByCapCountsEachType: Stats counts the jobs each capped type
// holds, summed over the shards of a sharded queue; a type with a rate
// limit too counts in HeldByRate instead, and a type holding none is left
// out.
func TestHeldByCapCountsEachType(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.DeclareQueue(tb.ctx, "q", 2); err != nil {
		t.Fatal(err)
	}
	for typ, n := range map[string]int{"a": 2, "b": 4, "idle": 2} {
		if err := tb.b.SetConcurrency(tb.ctx, "q", typ, n); err != nil {
			t.Fatal(err)
		}
	}
	var envs []*job.Envelope
	for typ, n := range map[string]int{"a": 7, "b": 9, "free": 3} {
		for i := range n {
			e := env(fmt.Sprintf("%s%d", typ, i), 0)
			e.Type = typ
			envs = append(envs, e)
		}
	}
	tb.enqueue(t, envs...)
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", 100, time.Minute)
	if err != nil || len(res.Jobs) != 2+4+3 {
		t.Fatalf("claimed %d, %v; want 2 a, 4 b and the 3 free", len(res.Jobs), err)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Held != 5+5 || !maps.Equal(st.HeldByCap, map[string]int64{"a": 5, "b": 5}) {
		t.Fatalf("stats: held %d by type %v (%v); want 10: a 5, b 5", st.Held, st.HeldByCap, err)
	}
}
