package broker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// weightedJobs enqueues per due jobs of each of keys ("<key>.<nn>", the
// keys' jobs interleaved in ready order, so that they join the turns in
// the order given) and extra jobs without a key due after them, and
// moves the clock past them all.
func weightedJobs(t *testing.T, tb *testBundle, keys []string, per, extra int) {
	t.Helper()
	var all []*job.Envelope
	for i := range per {
		for _, k := range keys {
			e := keyed(fmt.Sprintf("%s.%02d", k, i), k)
			e.Delay = time.Duration(i) * time.Millisecond
			all = append(all, e)
		}
	}
	for i := range extra {
		all = append(all, env(fmt.Sprintf("plain%02d", i), time.Duration(per+i)*time.Millisecond))
	}
	tb.enqueue(t, all...)
	tb.clock.Advance(time.Second)
}

// TestKeyWeights: with fair turns on and key A of weight 3, A, B (weight
// 1) and the jobs without a key (weight 1) with deep backlogs split each
// claim 3:1:1 (a claim of 10: 6, 2 and 2; of 5: 3, 1 and 1), each key's
// jobs in ready order; HeldKeys gives A's weight. Set back to 1, A's
// weight is gone (field and control flag) and the claims split evenly.
func TestKeyWeights(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	weightedJobs(t, tb, []string{"A", "B"}, 40, 20)
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyWeight(tb.ctx, "q", "A", 3); err != nil {
		t.Fatal(err)
	}
	var aOrder []string
	for i, c := range []struct{ n, a, b, plain int }{{10, 6, 2, 2}, {10, 6, 2, 2}, {5, 3, 1, 1}, {20, 12, 4, 4}} {
		res := tb.claim(t, c.n)
		got := byKey(res.Jobs)
		if got["A"] != c.a || got["B"] != c.b || got[""] != c.plain || len(got) != 3 {
			t.Fatalf("claim %d of %d took %v by key, want A %d, B %d, unkeyed %d", i, c.n, got, c.a, c.b, c.plain)
		}
		for _, j := range res.Jobs {
			if strings.HasPrefix(j.ID, "A.") {
				aOrder = append(aOrder, j.ID)
			}
		}
	}
	for i, id := range aOrder {
		if want := fmt.Sprintf("A.%02d", i); id != want {
			t.Fatalf("A's jobs claimed %v, want them in ready order", aOrder)
		}
	}
	hk, err := tb.b.HeldKeys(tb.ctx, "q", 5)
	if err != nil {
		t.Fatal(err)
	}
	weights := map[string]int{}
	for _, k := range hk.Keys {
		weights[k.Key] = k.Weight
	}
	if weights["A"] != 3 || weights["B"] != 1 {
		t.Fatalf("held keys' weights %v, want A 3 and B 1", weights)
	}
	if err := tb.b.SetKeyWeight(tb.ctx, "q", "A", 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := tb.rdb.Exists(tb.ctx, keyKey(tb, "keyweights")).Result(); n != 0 {
		t.Fatalf("keyweights left after A's weight went back to 1")
	}
	if tb.rdb.HExists(tb.ctx, tb.key("q", "controls"), "kw").Val() {
		t.Fatal("control flag kw left with no weight set")
	}
	if got := byKey(tb.claim(t, 6).Jobs); got["A"] != 2 || got["B"] != 2 || got[""] != 2 {
		t.Fatalf("with A's weight back to 1 a claim of 6 took %v by key, want 2 each", got)
	}
}

// TestKeyWeightsWithControls: a key's weight changes none of its other
// controls: A of weight 3 capped at 2 runs 2 jobs, C of weight 5 paused
// runs none, both leave the turns, and B takes the room; C resumed takes
// its 5 for B's 1.
func TestKeyWeightsWithControls(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	weightedJobs(t, tb, []string{"A", "B", "C"}, 40, 0)
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	for key, w := range map[string]int{"A": 3, "C": 5} {
		if err := tb.b.SetKeyWeight(tb.ctx, "q", key, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "A", 2); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "C"); err != nil {
		t.Fatal(err)
	}
	// The first claim deals A 3, B 1 and C 4 (the room left); A's cap holds
	// one of A's back, C's pause its 4.
	if got := byKey(tb.claim(t, 8).Jobs); got["A"] != 2 || got["B"] != 1 || got["C"] != 0 {
		t.Fatalf("first claim of 8 took %v by key, want A 2 (its cap), B 1, C none (paused)", got)
	}
	for i := range 2 {
		if got := byKey(tb.claim(t, 8).Jobs); got["B"] != 8 || len(got) != 1 {
			t.Fatalf("claim %d of 8 took %v by key, want B's 8 (A at its cap, C paused)", i+2, got)
		}
	}
	hk, err := tb.b.HeldKeys(tb.ctx, "q", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range hk.Keys {
		want := map[string]string{"A": "cap", "C": "paused"}[k.Key]
		if k.Key != "B" && (k.Reason != want || k.WaitsForTurn) {
			t.Errorf("held key %+v: want reason %q, out of the turns", k, want)
		}
	}
	if _, err := tb.b.ResumeKey(tb.ctx, "q", "C"); err != nil {
		t.Fatal(err)
	}
	if got := byKey(tb.claim(t, 6).Jobs); got["B"] != 1 || got["C"] != 5 || len(got) != 2 {
		t.Fatalf("after C's resume a claim of 6 took %v by key, want B 1 and C 5", got)
	}
}

// TestKeyWeightsShards: on a queue of 2 shards a key's weight is set on
// both, each shard deals its own turns by it, and setting 1 clears it on
// both.
func TestKeyWeightsShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	shards := tb.sharded(t, 2)
	weightedJobs(t, tb, []string{"A", "B"}, 40, 0)
	for i := range shards {
		on := map[string]int{}
		for _, key := range []string{"A", "B"} {
			for j := range 40 {
				if tb.shardOf(t, shards, "scheduled", fmt.Sprintf("%s.%02d", key, j)) == i {
					on[key]++
				}
			}
		}
		if on["A"] < 6 || on["B"] < 2 {
			t.Fatalf("shard %d holds %v by key; the test needs 6 of A and 2 of B", i, on)
		}
	}
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyWeight(tb.ctx, "q", "A", 3); err != nil {
		t.Fatal(err)
	}
	for i, s := range testkit.Shards(t, tb.b, "q") {
		base := strings.TrimSuffix(s.Keys().Held, "held:")
		if w := tb.rdb.HGet(tb.ctx, base+"keyweights", "A").Val(); w != "3" {
			t.Errorf("shard %d: A's weight %q, want 3", i, w)
		}
		var claimed []protocol.Claimed
		for range 2 {
			res, err := testkit.Drive(tb.b).ClaimShard(tb.ctx, s, 4, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			claimed = append(claimed, res.Jobs...)
		}
		if got := byKey(claimed); got["A"] != 6 || got["B"] != 2 {
			t.Errorf("shard %d: two claims of 4 took %v by key, want A 6 and B 2", i, got)
		}
	}
	if err := tb.b.SetKeyWeight(tb.ctx, "q", "A", 1); err != nil {
		t.Fatal(err)
	}
	for i, s := range testkit.Shards(t, tb.b, "q") {
		base := strings.TrimSuffix(s.Keys().Held, "held:")
		if n := tb.rdb.Exists(tb.ctx, base+"keyweights").Val(); n != 0 || tb.rdb.HExists(tb.ctx, s.Keys().Controls, "kw").Val() {
			t.Errorf("shard %d: weights left after A's went back to 1", i)
		}
	}
}

// TestKeyWeightSetAndRemove: setting a weight twice is harmless (a call
// sent again after a lost reply); 1 removes a key's weight, and the
// control flag goes with the last one.
func TestKeyWeightSetAndRemove(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	weights, controls := keyKey(tb, "keyweights"), tb.key("q", "controls")
	check := func(what string, want map[string]string) {
		t.Helper()
		got := tb.rdb.HGetAll(tb.ctx, weights).Val()
		if !maps.Equal(got, want) {
			t.Fatalf("%s: weights %v, want %v", what, got, want)
		}
		if kw := tb.rdb.HExists(tb.ctx, controls, "kw").Val(); kw != (len(want) > 0) {
			t.Fatalf("%s: control flag kw %v with weights %v", what, kw, want)
		}
	}
	set := func(key string, w int) {
		t.Helper()
		if err := tb.b.SetKeyWeight(tb.ctx, "q", key, w); err != nil {
			t.Fatal(err)
		}
	}
	set("A", 3)
	set("A", 3)
	check("A set twice", map[string]string{"A": "3"})
	set("B", 1000)
	set("A", 2)
	check("B set, A changed", map[string]string{"A": "2", "B": "1000"})
	set("A", 1)
	check("A back to 1", map[string]string{"B": "1000"})
	set("B", 1)
	set("B", 1)
	check("B back to 1, twice", map[string]string{})
}

// TestKeyWeightBadInput: bad input is refused with an error wrapping
// job.ErrInvalid that names what was wrong, and nothing is written.
func TestKeyWeightBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, c := range []struct {
		queue, key string
		w          int
		want       string
	}{
		{"q", "", 2, "key is empty"},
		{"q", "a b", 2, `key "a b"`},
		{"q", "A", 0, "key weight 0"},
		{"q", "A", -3, "key weight -3"},
		{"q", "A", 1001, "key weight 1001"},
		{"bad queue", "A", 2, `queue name "bad queue"`},
	} {
		err := tb.b.SetKeyWeight(tb.ctx, c.queue, c.key, c.w)
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetKeyWeight(%q, %q, %d) = %v, want ErrInvalid naming %s", c.queue, c.key, c.w, err, c.want)
		}
	}
	if keys := redistest.Keys(t, tb.rdb, tb.ns+":*"); len(keys) != 0 {
		t.Fatalf("bad input wrote %v", keys)
	}
}

// TestKeyWeightWrongTypedKeyChangesNothing: a keyweights key that is not
// a hash is refused, naming it, by SetKeyWeight (no control flag set) and
// by a claim with the turns on (no job moved nor claimed).
func TestKeyWeightWrongTypedKeyChangesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	weightedJobs(t, tb, []string{"A", "B"}, 5, 0)
	bad := keyKey(tb, "keyweights")
	if err := tb.rdb.Set(tb.ctx, bad, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyWeight(tb.ctx, "q", "A", 3); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("SetKeyWeight over a string: %v, want an error naming %s", err, bad)
	}
	if tb.rdb.HExists(tb.ctx, tb.key("q", "controls"), "kw").Val() {
		t.Fatal("the refused SetKeyWeight set the control flag")
	}
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	if err := tb.rdb.HSet(tb.ctx, tb.key("q", "controls"), "kw", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", 4, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("claim with a string keyweights: %v, want an error naming %s", err, bad)
	}
	if n := tb.rdb.ZCard(tb.ctx, tb.key("q", "scheduled")).Val(); n != 10 {
		t.Errorf("%d jobs scheduled after the refused claim, want all 10", n)
	}
	if n, _ := tb.rdb.Exists(tb.ctx, tb.key("q", "processing"), keyKey(tb, "keyturn"), keyKey(tb, "keyheld")).Result(); n != 0 {
		t.Errorf("%d of processing, keyturn and keyheld written by the refused claim, want none", n)
	}
}

// TestKeyWeightsClaimCost: with fair turns on, a claim costs the same
// commands before any weight was set and after the last weight went back
// to 1; while a weight is set it costs one HMGET and one TYPE more.
func TestKeyWeightsClaimCost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var all []*job.Envelope
	for i := range 20 {
		for _, k := range []string{"A", "B"} {
			e := &job.Envelope{ID: fmt.Sprintf("%s.%02d", k, i), Queue: "q", Type: "t", Payload: []byte(`{"n":1}`), MaxRetries: 3, Key: k}
			all = append(all, e)
		}
	}
	if err := b.Enqueue(ctx, all...); err != nil {
		t.Fatal(err)
	}
	if err := b.SetKeyFairness(ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	drv := testkit.Drive(b)
	claim := func() map[string]int {
		t.Helper()
		got := commandsOf(t, ctx, rdb, func() error {
			res, err := drv.Claim(ctx, "q", 4, time.Minute)
			if err == nil && len(res.Jobs) != 4 {
				t.Fatalf("claimed %d, want 4", len(res.Jobs))
			}
			return err
		})
		delete(got, "hset") // the claim's history writes vary with the clock
		return got
	}
	claim() // moves every due job to its key's held set
	before := claim()
	if err := b.SetKeyWeight(ctx, "q", "A", 3); err != nil {
		t.Fatal(err)
	}
	weighted := claim()
	if err := b.SetKeyWeight(ctx, "q", "A", 1); err != nil {
		t.Fatal(err)
	}
	after := claim()
	if !maps.Equal(before, after) {
		t.Errorf("claim without weights ran %v, after a weight was set and removed %v", before, after)
	}
	want := maps.Clone(before)
	want["hmget"]++
	want["type"]++
	if !maps.Equal(weighted, want) {
		t.Errorf("claim with a weight ran %v, want %v (one HMGET and one TYPE more)", weighted, want)
	}
}

// TestKeyWeightsSmallClaims: a turn that a claim's room cuts short goes
// on in the next claim, so claims of one or two jobs keep to the weights
// as larger ones do. A of weight 3 and B of weight 1, deep backlogs:
// claims of one job take A, A, A, B over and over; claims of two take
// A A, then A B; claims of three keep to 3:1 within a job. Once A's
// weight is set back to 1 the kept turn goes with the weights (no
// keyweights key is left) and the claims alternate again.
func TestKeyWeightsSmallClaims(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	weightedJobs(t, tb, []string{"A", "B"}, 60, 0)
	if err := tb.b.SetKeyFairness(tb.ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyWeight(tb.ctx, "q", "A", 3); err != nil {
		t.Fatal(err)
	}
	seq := func(n, claims int) string {
		t.Helper()
		var parts []string
		for range claims {
			var p string
			for _, j := range tb.claim(t, n).Jobs {
				k, _, _ := strings.Cut(j.ID, ".")
				p += k
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, " ")
	}
	if got, want := seq(1, 12), "A A A B A A A B A A A B"; got != want {
		t.Fatalf("claims of one job took %s, want %s", got, want)
	}
	if got, want := seq(2, 6), "AA AB AA AB AA AB"; got != want {
		t.Fatalf("claims of two jobs took %s, want %s", got, want)
	}
	got := byKey(nil)
	for range 8 {
		for k, v := range byKey(tb.claim(t, 3).Jobs) {
			got[k] += v
		}
	}
	if got["A"] < 17 || got["A"] > 19 || got["A"]+got["B"] != 24 {
		t.Fatalf("8 claims of three jobs took %v, want A 18 ± 1 of 24", got)
	}
	if err := tb.b.SetKeyWeight(tb.ctx, "q", "A", 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := tb.rdb.Exists(tb.ctx, keyKey(tb, "keyweights")).Result(); n != 0 {
		t.Fatalf("keyweights left after the last weight went")
	}
	if got := seq(1, 4); got != "A B A B" && got != "B A B A" {
		t.Fatalf("claims of one job without weights took %s, want A and B in turn", got)
	}
}
