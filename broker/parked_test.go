package broker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// typed is env with type typ.
func typed(id, typ string) *job.Envelope {
	e := env(id, 0)
	e.Type = typ
	return e
}

// parkedByType reads the parked set and counts its jobs by the type their
// stored envelope names.
func parkedByType(t *testing.T, tb *testBundle) map[string]int64 {
	t.Helper()
	ids, err := tb.rdb.ZRange(tb.ctx, keyKey(tb, "parked"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	if len(ids) == 0 {
		return out
	}
	bodies, err := tb.rdb.HMGet(tb.ctx, tb.key("q", "jobs"), ids...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bodies {
		s, _ := b.(string)
		var head struct {
			T string `json:"t"`
		}
		if err := json.Unmarshal([]byte(s), &head); err != nil || head.T == "" {
			t.Fatalf("parked job %s: body %q, %v", ids[i], s, err)
		}
		out[head.T]++
	}
	return out
}

// parkedCounts reads the counts kept in parkedtypes.
func parkedCounts(t *testing.T, tb *testBundle) map[string]int64 {
	t.Helper()
	all, err := tb.rdb.HGetAll(tb.ctx, keyKey(tb, "parkedtypes")).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for typ, v := range all {
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 {
			t.Fatalf("parkedtypes[%s] = %q, want a count over 0", typ, v)
		}
		out[typ] = n
	}
	return out
}

// TestParkedCountsFollowEveryPath drives a queue through 500 random steps
// (a fixed seed): enqueues, replaces and debounces (some with another
// type, some several of one id in one call), claims that park jobs of
// paused types, acks, expired leases reaped and retried, cancels,
// reschedules, type and queue pauses and resumes, and checks after each
// one that every type's count in parkedtypes is the number of its jobs in
// the parked set, and that Stats.ParkedByType says the same and sums to
// Stats.Parked. At the end the queue is emptied (no count is left) and
// forgotten (a stale count goes with it).
func TestParkedCountsFollowEveryPath(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	rng := rand.New(rand.NewPCG(35, 2))
	types := []string{"t0", "t1", "t2", "t3"}
	typ := func() string { return types[rng.IntN(len(types))] }
	var leases []protocol.Claimed
	next := 0
	id := func() string { return fmt.Sprintf("j%d", rng.IntN(max(next, 1))) }
	var maxParked, maxTypes int
	before := map[string]int64{}
	moved := map[string]int{} // steps of each kind that changed the parked jobs by type
	check := func(step int, what string) {
		t.Helper()
		want, got := parkedByType(t, tb), parkedCounts(t, tb)
		if !maps.Equal(before, want) {
			moved[what]++
		}
		before = want
		if !maps.Equal(got, want) {
			t.Fatalf("step %d (%s): parkedtypes %v, the parked set holds %v", step, what, got, want)
		}
		var sum int64
		for _, n := range want {
			sum += n
		}
		maxParked, maxTypes = max(maxParked, int(sum)), max(maxTypes, len(want))
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Parked != sum || len(st.ParkedByType) != len(want) || (len(want) > 0 && !maps.Equal(st.ParkedByType, want)) {
			t.Fatalf("step %d (%s): stats parked %d by type %v; want %d, %v", step, what, st.Parked, st.ParkedByType, sum, want)
		}
	}
	tolerate := func(err error) {
		t.Helper()
		if err != nil && !errors.Is(err, broker.ErrNotFound) && !errors.Is(err, broker.ErrInProgress) && !errors.Is(err, broker.ErrDuplicate) {
			t.Fatal(err)
		}
	}
	for step := range 500 {
		var what string
		switch r := rng.IntN(100); {
		case r < 25:
			what = "enqueue"
			e := typed(fmt.Sprintf("j%d", next), typ())
			e.Delay = time.Duration(rng.IntN(3)) * 500 * time.Millisecond
			next++
			tolerate(tb.b.Enqueue(tb.ctx, e)) // a debounce may have stored the id first
		case r < 31:
			what = "replace"
			e := typed(id(), typ())
			e.Replace, e.Payload = true, []byte(`{"n":2}`)
			tolerate(tb.b.Enqueue(tb.ctx, e))
		case r < 37:
			what = "debounce"
			n := 1 + rng.IntN(3) // several of one id in one call act in turn
			var es []*job.Envelope
			target := id()
			for range n {
				e := typed(target, typ())
				e.Debounce = time.Duration(1+rng.IntN(2)) * time.Second
				es = append(es, e)
			}
			var be *job.BatchError
			if err := tb.b.Enqueue(tb.ctx, es...); errors.As(err, &be) {
				for _, err := range be.Errs {
					tolerate(err)
				}
			} else {
				tolerate(err)
			}
		case r < 55:
			what = "claim"
			leases = append(leases, tb.claim(t, 1+rng.IntN(4)).Jobs...)
		case r < 65:
			what = "ack"
			if len(leases) > 0 {
				i := rng.IntN(len(leases))
				if err := testkit.Drive(tb.b).Ack(tb.ctx, leases[i].Lease); err != nil {
					t.Fatal(err)
				}
				leases = append(leases[:i], leases[i+1:]...)
			}
		case r < 68:
			what = "reap"
			tb.clock.Advance(11 * time.Second)
			drv := testkit.Drive(tb.b)
			reaped, err := drv.Reap(tb.ctx, "q", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range reaped.Jobs {
				if _, err := drv.RetryExpired(tb.ctx, c.Lease, 0, c.Envelope); err != nil {
					t.Fatal(err)
				}
			}
			leases = nil
		case r < 75:
			what = "cancel"
			_, err := tb.b.Cancel(tb.ctx, "q", id())
			tolerate(err)
		case r < 80:
			what = "reschedule"
			_, err := tb.b.Reschedule(tb.ctx, "q", id(), tb.clock.Now().Add(time.Duration(rng.IntN(3))*time.Second))
			tolerate(err)
		case r < 88:
			what = "pause type"
			if err := tb.b.Pause(tb.ctx, "q", typ()); err != nil {
				t.Fatal(err)
			}
		case r < 95:
			what = "resume type"
			if _, err := tb.b.Resume(tb.ctx, "q", typ()); err != nil {
				t.Fatal(err)
			}
		case r < 97:
			what = "pause queue"
			if err := tb.b.Pause(tb.ctx, "q", ""); err != nil {
				t.Fatal(err)
			}
		default:
			what = "resume queue"
			if _, err := tb.b.Resume(tb.ctx, "q", ""); err != nil {
				t.Fatal(err)
			}
		}
		tb.clock.Advance(time.Duration(rng.IntN(500)) * time.Millisecond)
		check(step, what)
	}
	for _, what := range []string{"claim", "cancel", "replace", "debounce", "resume type"} {
		if moved[what] == 0 {
			t.Errorf("no %s step changed the parked jobs: %v", what, moved)
		}
	}
	if maxParked < 10 || maxTypes < 2 {
		t.Fatalf("at most %d jobs of %d types were parked at once: the steps did not exercise the parked set", maxParked, maxTypes)
	}
	t.Logf("up to %d jobs of up to %d types parked at once; steps that changed them: %v", maxParked, maxTypes, moved)

	// Emptied (the parked jobs cancelled) and forgotten: no count is left.
	if _, err := tb.b.Resume(tb.ctx, "q", ""); err != nil {
		t.Fatal(err)
	}
	parked, err := tb.rdb.ZRange(tb.ctx, keyKey(tb, "parked"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range parked {
		if _, err := tb.b.Cancel(tb.ctx, "q", id); err != nil {
			t.Fatal(err)
		}
	}
	check(-1, "parked jobs cancelled")
	if n, err := tb.rdb.Exists(tb.ctx, keyKey(tb, "parkedtypes")).Result(); err != nil || n != 0 {
		t.Fatalf("parkedtypes left with no job parked: %d, %v", n, err)
	}
	// Forget deletes the counts with the queue's other keys, even a stale
	// one (written here by hand).
	for _, c := range leases {
		if err := testkit.Drive(tb.b).Ack(tb.ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range types {
		if _, err := tb.b.Resume(tb.ctx, "q", typ); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Scheduled+st.Processing+st.Parked+st.Held == 0 {
			break
		}
		res := tb.claim(t, 100)
		for _, c := range res.Jobs {
			if err := testkit.Drive(tb.b).Ack(tb.ctx, c.Lease); err != nil {
				t.Fatal(err)
			}
		}
		tb.clock.Advance(3 * time.Second)
	}
	if err := tb.rdb.HSet(tb.ctx, keyKey(tb, "parkedtypes"), "t0", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.Forget(tb.ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if n, err := tb.rdb.Exists(tb.ctx, keyKey(tb, "parkedtypes")).Result(); err != nil || n != 0 {
		t.Fatalf("parkedtypes left after Forget: %d, %v", n, err)
	}
}

// TestParkedByTypeOverShards: Stats.ParkedByType sums the counts of every
// shard of a sharded queue, one entry per type holding parked jobs (a
// paused type holding none is left out); resuming one type leaves the
// other's count as it was.
func TestParkedByTypeOverShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.DeclareQueue(tb.ctx, "q", 3); err != nil {
		t.Fatal(err)
	}
	var envs []*job.Envelope
	for i := range 30 {
		envs = append(envs, typed(fmt.Sprintf("a%d", i), "sms"), typed(fmt.Sprintf("b%d", i), "mail"), typed(fmt.Sprintf("c%d", i), "push"))
	}
	tb.enqueue(t, envs...)
	for _, typ := range []string{"sms", "mail", "idle"} {
		if err := tb.b.Pause(tb.ctx, "q", typ); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(tb.claim(t, 200).Jobs); got != 30 {
		t.Fatalf("claimed %d, want the 30 push jobs", got)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if want := map[string]int64{"sms": 30, "mail": 30}; err != nil || st.Parked != 60 || !maps.Equal(st.ParkedByType, want) {
		t.Fatalf("stats parked %d by type %v, %v; want 60, %v", st.Parked, st.ParkedByType, err, want)
	}
	if n, err := tb.b.Resume(tb.ctx, "q", "sms"); err != nil || n != 30 {
		t.Fatalf("resume sms: %d, %v", n, err)
	}
	st, err = testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if want := map[string]int64{"mail": 30}; err != nil || st.Parked != 30 || !maps.Equal(st.ParkedByType, want) {
		t.Fatalf("after resuming sms: parked %d by type %v, %v; want 30, %v", st.Parked, st.ParkedByType, err, want)
	}
}

// TestResumeRecountsParked: jobs parked with no count (by a version that
// did not keep them) show in Parked but not in ParkedByType; the next
// resume of any type reads every parked body and leaves the counts exact.
func TestResumeRecountsParked(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, typed("a1", "sms"), typed("a2", "sms"), typed("b1", "mail"))
	for _, typ := range []string{"sms", "mail"} {
		if err := tb.b.Pause(tb.ctx, "q", typ); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(tb.claim(t, 10).Jobs); got != 0 {
		t.Fatalf("claimed %d of paused types", got)
	}
	// As an older version leaves them: parked, not counted; a stale count too.
	if err := tb.rdb.HSet(tb.ctx, keyKey(tb, "parkedtypes"), "gone", 4).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.rdb.HDel(tb.ctx, keyKey(tb, "parkedtypes"), "sms", "mail").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Resume(tb.ctx, "q", "other"); err != nil {
		t.Fatal(err)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if want := map[string]int64{"sms": 2, "mail": 1}; err != nil || st.Parked != 3 || !maps.Equal(st.ParkedByType, want) {
		t.Fatalf("after a resume: parked %d by type %v, %v; want 3, %v", st.Parked, st.ParkedByType, err, want)
	}
}

// TestParkedCountsWrongTypeChangesNothing: a parked-counts key of the
// wrong type (written by another program) stops the scripts that would
// write it before they change anything, naming the key.
func TestParkedCountsWrongTypeChangesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, typed("a1", "sms"), typed("a2", "sms"))
	if err := tb.b.Pause(tb.ctx, "q", "sms"); err != nil {
		t.Fatal(err)
	}
	bad := keyKey(tb, "parkedtypes")
	if err := tb.rdb.Set(tb.ctx, bad, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", 10, time.Second); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("claim that parks: %v, want an error naming %s", err, bad)
	}
	if n := tb.rdb.ZCard(tb.ctx, keyKey(tb, "parked")).Val(); n != 0 {
		t.Fatalf("%d parked by a claim that failed", n)
	}
	// Parked with the key right, then broken again: cancel, replace and
	// resume change nothing.
	if err := tb.rdb.Del(tb.ctx, bad).Err(); err != nil {
		t.Fatal(err)
	}
	tb.claim(t, 10)
	if err := tb.rdb.Set(tb.ctx, bad, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replace := typed("a2", "sms")
	replace.Replace = true
	for name, call := range map[string]func() error{
		"cancel":  func() error { _, err := tb.b.Cancel(tb.ctx, "q", "a1"); return err },
		"replace": func() error { return tb.b.Enqueue(tb.ctx, replace) },
		"resume":  func() error { _, err := tb.b.Resume(tb.ctx, "q", "sms"); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v, want an error naming %s", name, err, bad)
		}
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Parked != 2 || !slices.Equal(st.PausedTypes, []string{"sms"}) {
		t.Fatalf("after the failed calls: %+v, %v; want 2 parked, sms paused", st, err)
	}
}
