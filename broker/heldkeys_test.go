package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// heldKeysOf reads HeldKeys and renders each key as
// "key held/running cap[own] reason".
func heldKeysOf(t *testing.T, tb *testBundle, n int) (broker.HeldKeys, string) {
	t.Helper()
	hk, err := tb.b.HeldKeys(tb.ctx, "q", n)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, k := range hk.Keys {
		own := ""
		if k.OwnCap {
			own = "own"
		}
		p := ""
		if k.Paused {
			p = " p"
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d %d%s %s%s", k.Key, k.Held, k.Running, k.Cap, own, k.Reason, p))
	}
	return hk, strings.Join(parts, "; ")
}

// TestHeldKeysTopAndWhy: HeldKeys lists the keys holding the most jobs
// back, with their held and running jobs, their cap (own or default) and
// why (cap or pause), then paused keys holding nothing; the counts follow
// every way a held job leaves (cancel, reschedule, replace, a slot freed,
// a resume), and agree with Stats.
func TestHeldKeysTopAndWhy(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 10 {
		all = append(all, keyed(fmt.Sprintf("big.%d", i), "big"))
		if i < 5 {
			all = append(all, keyed(fmt.Sprintf("mid.%d", i), "mid"))
		}
		if i < 2 {
			all = append(all, keyed(fmt.Sprintf("small.%d", i), "small"))
		}
		tb.clock.Advance(time.Millisecond)
	}
	all = append(all, env("plain", 0))
	tb.enqueue(t, all...)
	for _, c := range []struct {
		key string
		n   int
	}{{"", 1}, {"mid", 2}} {
		if err := tb.b.SetKeyConcurrency(tb.ctx, "q", c.key, c.n); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"small", "idle"} {
		if err := tb.b.PauseKey(tb.ctx, "q", k); err != nil {
			t.Fatal(err)
		}
	}
	claimed := claimAll(t, tb)
	if got := byKey(claimed); got["big"] != 1 || got["mid"] != 2 || got["small"] != 0 || got[""] != 1 {
		t.Fatalf("claimed %v", got)
	}
	hk, got := heldKeysOf(t, tb, 10)
	if want := "big 9/1 1 cap; mid 3/2 2own cap; small 2/0 1 paused p; idle 0/0 1 paused p"; got != want {
		t.Fatalf("held keys:\n got %s\nwant %s", got, want)
	}
	if hk.Holding != 3 || hk.PausedKeys != 2 || hk.DefaultCap != 1 {
		t.Fatalf("holding %d, paused %d, default %d; want 3, 2, 1", hk.Holding, hk.PausedKeys, hk.DefaultCap)
	}
	if _, got := heldKeysOf(t, tb, 2); got != "big 9/1 1 cap; mid 3/2 2own cap" {
		t.Fatalf("top 2: %s", got)
	}
	// Every way out of a held set keeps the counts.
	if _, err := tb.b.Cancel(tb.ctx, "q", "big.9"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Reschedule(tb.ctx, "q", "mid.4", tb.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	repl := keyed("small.1", "small")
	repl.Replace, repl.Payload = true, []byte(`{"n":2}`)
	tb.enqueue(t, repl)
	if _, got := heldKeysOf(t, tb, 10); got != "big 8/1 1 cap; mid 2/2 2own cap; small 1/0 1 paused p; idle 0/0 1 paused p" {
		t.Fatalf("after a cancel, a reschedule and a replace: %s", got)
	}
	for _, c := range claimed {
		if strings.HasPrefix(c.ID, "big.") {
			if err := testkit.Drive(tb.b).Ack(tb.ctx, c.Lease); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := tb.b.ResumeKey(tb.ctx, "q", "idle"); err != nil {
		t.Fatal(err)
	}
	if _, got := heldKeysOf(t, tb, 10); got != "big 7/0 1 cap; mid 2/2 2own cap; small 1/0 1 paused p" {
		t.Fatalf("after big's ack and idle's resume: %s", got)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.HeldByKey != 7+2+1 {
		t.Fatalf("stats %+v, %v; want 10 held by keys", st, err)
	}
	// Everything released: nothing is left listed, and no count remains.
	if n, err := tb.b.ResumeKey(tb.ctx, "q", "small"); err != nil || n != 1 {
		t.Fatalf("resume small: %d, %v", n, err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 0); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "mid", 0); err != nil {
		t.Fatal(err)
	}
	if hk, got := heldKeysOf(t, tb, 10); got != "" || hk.Holding != 0 || hk.PausedKeys != 0 || hk.DefaultCap != 0 {
		t.Fatalf("after every cap cleared and key resumed: %q %+v", got, hk)
	}
	if n, err := tb.rdb.Exists(tb.ctx, keyKey(tb, "keyheld")).Result(); err != nil || n != 0 {
		t.Fatalf("keyheld left: %d, %v", n, err)
	}
}

// TestHeldKeysShards: on a queue of 2 shards a key's held and running
// jobs are summed over both, whichever shard lists it.
func TestHeldKeysShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.sharded(t, 2)
	var all []*job.Envelope
	for i := range 30 {
		all = append(all, keyed(fmt.Sprintf("a.%02d", i), "a"))
		if i < 12 {
			all = append(all, keyed(fmt.Sprintf("b.%02d", i), "b"))
		}
		if i < 4 {
			all = append(all, keyed(fmt.Sprintf("c.%02d", i), "c"))
		}
	}
	tb.enqueue(t, all...)
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 2); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "c"); err != nil {
		t.Fatal(err)
	}
	for _, s := range testkit.Shards(t, tb.b, "q") {
		for range 2 {
			if _, err := testkit.Drive(tb.b).ClaimShard(tb.ctx, s, 50, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A cap of 2 over 2 shards: one running per shard that has the key.
	if _, got := heldKeysOf(t, tb, 10); got != "a 28/2 2 cap; b 10/2 2 cap; c 4/0 2 paused p" {
		t.Fatalf("held keys over 2 shards: %s", got)
	}
	if _, got := heldKeysOf(t, tb, 1); got != "a 28/2 2 cap" {
		t.Fatalf("top 1: %s", got)
	}
}

// TestHeldKeysBadInput: a bad n or queue name is refused with
// job.ErrInvalid; a queue never used lists no keys.
func TestHeldKeysBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, keyed("a.1", "a"))
	for name, c := range map[string]struct {
		queue string
		n     int
		says  string
	}{
		"zero":      {"q", 0, "n 0"},
		"too many":  {"q", broker.MaxHeldKeys + 1, "n 1001"},
		"bad queue": {"q q", 10, "queue"},
	} {
		if _, err := tb.b.HeldKeys(tb.ctx, c.queue, c.n); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, c.says)
		}
	}
	if hk, err := tb.b.HeldKeys(tb.ctx, "never", 10); err != nil || len(hk.Keys) != 0 {
		t.Errorf("unused queue: %+v, %v; want no keys", hk, err)
	}
	if hk, err := tb.b.HeldKeys(tb.ctx, "q", 10); err != nil || len(hk.Keys) != 0 || hk.Holding != 0 {
		t.Errorf("nothing held: %+v, %v", hk, err)
	}
}

// TestHeldCountsFollowEveryPath drives a queue through 400 random steps
// (a fixed seed): enqueues, replaces, claims, acks, expired leases
// reaped and retried, cancels, reschedules, key pauses and resumes, cap
// changes, rate-limit changes and fair turns on and off, and checks after
// each one that every
// key's count in keyheld is the size of its held set, that the '#' total
// is their sum, and that Stats.HeldByKey and HeldKeys agree with them.
// Then, the keys resumed and every lease acknowledged, claims and acks
// with the clock moving on must drain the queue under the caps and rate
// limits left: no held job is left behind by a key that nothing wakes.
func TestHeldCountsFollowEveryPath(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	rng := rand.New(rand.NewPCG(37, 5))
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	var leases []protocol.Claimed
	next := 0
	id := func() string { return fmt.Sprintf("j%d", rng.IntN(max(next, 1))) }
	heldPrefix := strings.TrimSuffix(keyKey(tb, "keyheld"), "keyheld") + "held:#"
	var maxHeld int64
	rateHeld := 0              // checks that found a key held by its rate limit
	fair, turnHeld := false, 0 // fair turns on; checks that found a key waiting for its turn
	check := func(step int, what string) {
		t.Helper()
		counts, err := tb.rdb.ZRangeWithScores(tb.ctx, keyKey(tb, "keyheld"), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		listed, total, sum := map[string]int64{}, int64(-1), int64(0)
		for _, z := range counts {
			if z.Member == "#" {
				total = int64(z.Score)
			} else {
				listed[z.Member.(string)] = int64(z.Score)
			}
		}
		for _, k := range keys {
			n := tb.rdb.ZCard(tb.ctx, heldPrefix+k).Val()
			sum += n
			// A held job is in no other set of the queue.
			for _, id := range tb.rdb.ZRange(tb.ctx, heldPrefix+k, 0, -1).Val() {
				if _, err := tb.rdb.ZScore(tb.ctx, tb.key("q", "scheduled"), id).Result(); err == nil {
					t.Fatalf("step %d (%s): job %s is held by key %s and scheduled too", step, what, id, k)
				}
			}
			if listed[k] != n {
				t.Fatalf("step %d (%s): key %s counted %d, holds %d", step, what, k, listed[k], n)
			}
		}
		maxHeld = max(maxHeld, sum)
		if (sum == 0 && total != -1) || (sum > 0 && total != sum) {
			t.Fatalf("step %d (%s): total %d, held sets hold %d", step, what, total, sum)
		}
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
		if err != nil || st.HeldByKey != sum {
			t.Fatalf("step %d (%s): stats %d held by keys, %v; want %d", step, what, st.HeldByKey, err, sum)
		}
		hk, err := tb.b.HeldKeys(tb.ctx, "q", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range hk.Keys {
			if k.Held != listed[k.Key] {
				t.Fatalf("step %d (%s): HeldKeys says %s holds %d, want %d", step, what, k.Key, k.Held, listed[k.Key])
			}
			switch k.Reason {
			case "rate":
				rateHeld++
			case "turn":
				turnHeld++
			}
		}
	}
	for step := range 400 {
		var what string
		switch r := rng.IntN(100); {
		case r < 30:
			what = "enqueue"
			e := keyed(fmt.Sprintf("j%d", next), keys[rng.IntN(len(keys))])
			next++
			tb.enqueue(t, e)
		case r < 35:
			what = "replace"
			e := keyed(id(), keys[rng.IntN(len(keys))])
			e.Replace, e.Payload = true, []byte(`{"n":2}`)
			if err := tb.b.Enqueue(tb.ctx, e); err != nil && !errors.Is(err, broker.ErrInProgress) {
				t.Fatal(err)
			}
		case r < 55:
			what = "claim"
			leases = append(leases, tb.claim(t, 1+rng.IntN(4)).Jobs...)
		case r < 70:
			what = "ack"
			if len(leases) > 0 {
				i := rng.IntN(len(leases))
				if err := testkit.Drive(tb.b).Ack(tb.ctx, leases[i].Lease); err != nil {
					t.Fatal(err)
				}
				leases = append(leases[:i], leases[i+1:]...)
			}
		case r < 73:
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
		case r < 78:
			what = "cancel"
			if _, err := tb.b.Cancel(tb.ctx, "q", id()); err != nil && !errors.Is(err, broker.ErrNotFound) && !errors.Is(err, broker.ErrInProgress) {
				t.Fatal(err)
			}
		case r < 83:
			what = "reschedule"
			if _, err := tb.b.Reschedule(tb.ctx, "q", id(), tb.clock.Now().Add(time.Duration(rng.IntN(3))*time.Second)); err != nil && !errors.Is(err, broker.ErrNotFound) && !errors.Is(err, broker.ErrInProgress) {
				t.Fatal(err)
			}
		case r < 88:
			what = "pause"
			if err := tb.b.PauseKey(tb.ctx, "q", keys[rng.IntN(len(keys))]); err != nil {
				t.Fatal(err)
			}
		case r < 93:
			what = "resume"
			if _, err := tb.b.ResumeKey(tb.ctx, "q", keys[rng.IntN(len(keys))]); err != nil {
				t.Fatal(err)
			}
		case r < 95:
			what = "cap"
			key := ""
			if rng.IntN(2) == 0 {
				key = keys[rng.IntN(len(keys))]
			}
			if err := tb.b.SetKeyConcurrency(tb.ctx, "q", key, rng.IntN(3)); err != nil {
				t.Fatal(err)
			}
		case r < 98:
			what = "rate"
			key := ""
			if rng.IntN(2) == 0 {
				key = keys[rng.IntN(len(keys))]
			}
			var lim job.RateLimit
			switch rng.IntN(3) {
			case 0: // cleared
			case 1:
				lim = job.RateLimit{Count: 1 + rng.IntN(2), Per: time.Second}
			default:
				lim = job.RateLimit{Count: 1 + rng.IntN(2), Per: time.Second, Strict: true}
			}
			if err := tb.b.SetKeyRateLimit(tb.ctx, "q", key, lim); err != nil {
				t.Fatal(err)
			}
		default:
			what = "fair"
			fair = !fair
			if err := tb.b.SetKeyFairness(tb.ctx, "q", fair); err != nil {
				t.Fatal(err)
			}
		}
		tb.clock.Advance(time.Duration(rng.IntN(500)) * time.Millisecond)
		check(step, what)
	}
	if maxHeld < 10 {
		t.Fatalf("at most %d jobs were held at once: the steps did not exercise the held sets", maxHeld)
	}
	if rateHeld < 10 || turnHeld < 10 {
		t.Fatalf("a key was held by its rate limit in %d checks, waiting for its turn in %d: the steps did not exercise them", rateHeld, turnHeld)
	}
	t.Logf("up to %d jobs held at once; a key held by its rate in %d checks, waiting for its turn in %d", maxHeld, rateHeld, turnHeld)

	// Every held job comes out under the caps and limits left.
	for _, k := range keys {
		if _, err := tb.b.ResumeKey(tb.ctx, "q", k); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		for _, c := range leases {
			if err := testkit.Drive(tb.b).Ack(tb.ctx, c.Lease); err != nil {
				t.Fatal(err)
			}
		}
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Scheduled+st.Held+st.Processing == 0 {
			break
		}
		if i == 100 {
			hk, _ := tb.b.HeldKeys(tb.ctx, "q", 10)
			t.Fatalf("after 100 s of claims and acks: %d scheduled, %d held, %d processing; held keys %+v", st.Scheduled, st.Held, st.Processing, hk)
		}
		tb.clock.Advance(time.Second)
		leases = tb.claim(t, 100).Jobs
		check(400+i, "drain")
	}
}
