package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestKeyFairness: key A has 100 due jobs, key B 3 due after all of A's,
// and 5 jobs without a key are due last. In ready order a claim of 10
// takes 10 of A's; with fair turns it deals the 10 out: B's 3 at once,
// the unkeyed jobs' 3 and A's 4, each key's in ready order, and A's rest
// wait for their turns (pending, counted held by their key, HeldKeys
// reason "turn"). Claims then drain every job once; turned off, the jobs
// waiting for a turn go back to the schedule.
func TestKeyFairness(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 100 {
		e := keyed(fmt.Sprintf("A.%03d", i), "A")
		e.Delay = time.Duration(i) * time.Millisecond
		all = append(all, e)
	}
	for i := range 3 {
		e := keyed(fmt.Sprintf("B.%03d", i), "B")
		e.Delay = 200*time.Millisecond + time.Duration(i)*time.Millisecond
		all = append(all, e)
	}
	for i := range 5 {
		all = append(all, env(fmt.Sprintf("plain%d", i), 300*time.Millisecond+time.Duration(i)*time.Millisecond))
	}
	tb.enqueue(t, all...)
	tb.clock.Advance(time.Second)
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	// Stats says the turns are on, and no key control reads as a paused
	// type.
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 1000, Per: time.Second, Burst: 1000}); err != nil {
		t.Fatal(err)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || !st.FairKeys || len(st.PausedTypes) != 0 {
		t.Fatalf("stats fair %v, paused types %q, %v; want the turns on and no type paused", st.FairKeys, st.PausedTypes, err)
	}
	res := tb.claim(t, 10)
	got := byKey(res.Jobs)
	if got["B"] != 3 || got[""] != 3 || got["A"] != 4 {
		t.Fatalf("a fair claim of 10 took %v, want B's 3, 3 unkeyed and 4 of A's", ids(res.Jobs))
	}
	seen := map[string]bool{}
	var order []string
	for _, c := range res.Jobs {
		seen[c.ID] = true
		if strings.HasPrefix(c.ID, "A.") {
			order = append(order, c.ID)
		}
	}
	if strings.Join(order, ",") != "A.000,A.001,A.002,A.003" {
		t.Errorf("A's jobs claimed %v, want its first four in order", order)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.HeldByKey != 96 {
		t.Fatalf("stats %+v, %v; want A's 96 held waiting for a turn", st, err)
	}
	hk, err := tb.b.HeldKeys(tb.ctx, "q", 5)
	if err != nil || len(hk.Keys) != 1 || hk.Keys[0].Key != "A" || hk.Keys[0].Reason != "turn" || !hk.Keys[0].WaitsForTurn {
		t.Fatalf("held keys %+v, %v; want A waiting for its turn", hk, err)
	}
	if info, err := tb.b.Job(tb.ctx, "q", "A.050"); err != nil || info.State != job.StateScheduled {
		t.Fatalf("a job waiting for its turn: %+v, %v", info, err)
	}
	// A new key's due job is claimed in the next claim, ahead of A's
	// rest: the turns are A, the unkeyed, then C, one each, and A again.
	late := keyed("C.000", "C")
	tb.enqueue(t, late)
	res = tb.claim(t, 4)
	if strings.Join(ids(res.Jobs), ",") != "A.004,C.000,A.005,plain3" {
		t.Fatalf("next claim of 4 took %v, want A.004, plain3, C.000 and A.005", ids(res.Jobs))
	}
	for _, c := range res.Jobs {
		seen[c.ID] = true
	}
	// Turned off: A's held jobs are back in the schedule, claimed in order.
	if err := tb.b.SetKeyFairness(tb.ctx, "q", false); err != nil {
		t.Fatal(err)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.HeldByKey != 0 || st.Held != 0 || st.FairKeys {
		t.Fatalf("after turning the turns off: %+v, %v; want nothing held and the turns off", st, err)
	}
	for {
		res := tb.claim(t, 25)
		if len(res.Jobs) == 0 {
			break
		}
		for _, c := range res.Jobs {
			if seen[c.ID] {
				t.Fatalf("%s claimed twice", c.ID)
			}
			seen[c.ID] = true
		}
	}
	if len(seen) != 109 {
		t.Fatalf("claimed %d distinct jobs, want 109", len(seen))
	}
	if n, _ := tb.rdb.Exists(tb.ctx, keyKey(tb, "keyturn"), keyKey(tb, "keyheld")).Result(); n != 0 {
		t.Fatalf("%d of keyturn and keyheld left", n)
	}
}

// TestKeyFairnessWithControls: a key's own controls still hold under fair
// turns, and take the key out of the turns until they send its jobs back:
// a key capped at 1 runs one job at a time, a paused key none, a key at
// 2 per minute two; the other keys share the room.
func TestKeyFairnessWithControls(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	keyedJobs(t, tb, 4, 20, 0) // k00..k03, 20 each
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "k00", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "k01"); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "k02", job.RateLimit{Count: 2, Per: time.Minute, Strict: true}); err != nil {
		t.Fatal(err)
	}
	var claimed []protocol.Claimed
	for range 6 {
		claimed = append(claimed, tb.claim(t, 8).Jobs...)
	}
	got := byKey(claimed)
	if got["k00"] != 1 || got["k01"] != 0 || got["k02"] != 2 || got["k03"] != 20 {
		t.Fatalf("claimed %v by key, want k00 1 (capped), k01 0 (paused), k02 2 (rate), k03 all 20", got)
	}
	hk, err := tb.b.HeldKeys(tb.ctx, "q", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range hk.Keys {
		want := map[string]string{"k00": "cap", "k01": "paused", "k02": "rate"}[k.Key]
		if k.Reason != want || k.WaitsForTurn {
			t.Errorf("held key %+v: want reason %q, out of the turns", k, want)
		}
	}
	res := tb.claim(t, 8)
	if len(res.Jobs) != 0 || !res.Next.After(tb.clock.Now()) {
		t.Fatalf("with every key held by its controls claimed %v, next %v: want nothing until a token", ids(res.Jobs), res.Next)
	}
	// k00's job ends: its next starts.
	for _, c := range claimed {
		if strings.HasPrefix(c.ID, "k00.") {
			if err := testkit.Drive(tb.b).Ack(tb.ctx, c.Lease); err != nil {
				t.Fatal(err)
			}
		}
	}
	if res := tb.claim(t, 8); strings.Join(ids(res.Jobs), ",") != "k00.01" {
		t.Fatalf("after k00's ack claimed %v, want k00.01", ids(res.Jobs))
	}
	// k01 resumed: it takes its turns again.
	if _, err := tb.b.ResumeKey(tb.ctx, "q", "k01"); err != nil {
		t.Fatal(err)
	}
	if got := byKey(tb.claim(t, 8).Jobs); got["k01"] != 8 {
		t.Fatalf("after k01's resume claimed %v by key, want 8 of k01", got)
	}
}

// TestKeyFairnessEnqueue: with fair turns on, a job with a key enqueued
// due goes straight to its key's held set and its key to the turns (no
// claim has to move it past another key's backlog); one due later, and
// jobs without a key, go to the schedule; a batch does the same per job,
// a replace of a routed job leaves it in one place, and a debounce of a
// job waiting for its turn takes the new arguments in place.
func TestKeyFairnessEnqueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	where := func(id, key string) string {
		t.Helper()
		_, inSched := tb.rdb.ZScore(tb.ctx, tb.key("q", "scheduled"), id).Result()
		_, inHeld := tb.rdb.ZScore(tb.ctx, strings.TrimSuffix(keyKey(tb, "keyheld"), "keyheld")+"held:#"+key, id).Result()
		switch {
		case inSched == nil && inHeld == nil:
			return "both"
		case inSched == nil:
			return "scheduled"
		case inHeld == nil:
			return "held"
		}
		return "nowhere"
	}
	tb.enqueue(t, keyed("A.1", "A"))
	later := keyed("A.2", "A")
	later.Delay = time.Minute
	tb.enqueue(t, later)
	tb.enqueue(t, env("plain", 0))
	tb.enqueue(t, keyed("B.1", "B"), keyed("B.2", "B"), env("plain2", 0)) // a batch
	for id, want := range map[string]string{"A.1": "held", "A.2": "scheduled", "B.1": "held", "B.2": "held"} {
		if got := where(id, id[:1]); got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
	if got := tb.rdb.ZRange(tb.ctx, keyKey(tb, "keyturn"), 0, -1).Val(); strings.Join(got, ",") != "A,B" {
		t.Errorf("turns %v, want A then B", got)
	}
	repl := keyed("B.1", "B")
	repl.Replace, repl.Payload = true, []byte(`{"n":2}`)
	tb.enqueue(t, repl)
	if got := where("B.1", "B"); got != "held" {
		t.Errorf("replaced B.1 is %s, want held", got)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.HeldByKey != 3 || st.Scheduled != 3 {
		t.Fatalf("stats held by key %d, scheduled %d, %v; want 3 and 3", st.HeldByKey, st.Scheduled, err)
	}
	res := tb.claim(t, 10)
	if got := byKey(res.Jobs); got["A"] != 1 || got["B"] != 2 || got[""] != 2 {
		t.Fatalf("claimed %v, want A.1, B's two and the two unkeyed", ids(res.Jobs))
	}
	for _, c := range res.Jobs {
		if c.ID == "B.1" && string(c.Envelope.Payload) != `{"n":2}` {
			t.Errorf("B.1 ran with %s, want the replaced arguments", c.Envelope.Payload)
		}
	}
}

// TestKeyFairnessWrongTypedKeyChangesNothing: with fair turns on, an
// enqueue whose key's held set is not a sorted set fails naming it, single
// and in a batch, and stores nothing.
func TestKeyFairnessWrongTypedKeyChangesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	bad := strings.TrimSuffix(keyKey(tb, "keyheld"), "keyheld") + "held:#A"
	if err := tb.rdb.Set(tb.ctx, bad, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for name, envs := range map[string][]*job.Envelope{
		"single": {keyed("A.1", "A")},
		"batch":  {env("plain", 0), keyed("A.2", "A")},
	} {
		err := tb.b.Enqueue(tb.ctx, envs...)
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v, want an error naming %s", name, err, bad)
		}
	}
	if n, err := tb.rdb.HLen(tb.ctx, tb.key("q", "jobs")).Result(); err != nil || n != 0 {
		t.Fatalf("%d jobs stored (%v), want none", n, err)
	}
	if n, _ := tb.rdb.Exists(tb.ctx, tb.key("q", "scheduled"), keyKey(tb, "keyturn")).Result(); n != 0 {
		t.Fatalf("%d of scheduled and keyturn written, want none", n)
	}
}
