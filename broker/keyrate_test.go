package broker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
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

// keyedJobs enqueues per jobs for each of keys keys ("k00".."k<keys-1>",
// ids "<key>.<i>", ready i ms after the epoch so each key's order is
// known) and extra jobs without a key, then moves the clock past them.
func keyedJobs(t *testing.T, tb *testBundle, keys, per, extra int) {
	t.Helper()
	var all []*job.Envelope
	for i := range per {
		for k := range keys {
			e := keyed(fmt.Sprintf("k%02d.%02d", k, i), fmt.Sprintf("k%02d", k))
			e.Delay = time.Duration(i) * time.Millisecond
			all = append(all, e)
		}
	}
	for i := range extra {
		all = append(all, env(fmt.Sprintf("plain%02d", i), 0))
	}
	tb.enqueue(t, all...)
	tb.clock.Advance(time.Second)
}

// TestKeyRateLimit: with a strict default of 3 per second per key, 10 keys
// of 10 due jobs each and 5 jobs without a key, a claim leases 3 of each
// key, earliest first, and every unkeyed job; the rest are held (pending,
// no attempt spent) and the claim says when the next tokens come. At that
// time the held jobs start first, 3 per key again; a key's own limit wins
// over the default and takes effect for its held jobs at the next claim.
func TestKeyRateLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	keyedJobs(t, tb, 10, 10, 5)
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 3, Per: time.Second, Strict: true}); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 200)
	got := byKey(res.Jobs)
	for k := range 10 {
		if n := got[fmt.Sprintf("k%02d", k)]; n != 3 {
			t.Errorf("key k%02d: %d claimed, want its 3 per second", k, n)
		}
	}
	if got[""] != 5 {
		t.Errorf("%d unkeyed jobs claimed, want 5", got[""])
	}
	for _, c := range res.Jobs {
		if strings.HasPrefix(c.ID, "k") && c.ID[4:] > "02" {
			t.Errorf("claimed %s before its key's earlier jobs", c.ID)
		}
	}
	start := tb.clock.Now()
	if !res.Next.Equal(start.Add(time.Second)) {
		t.Errorf("next %v, want the next tokens a second on", res.Next.Sub(start))
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.HeldByKey != 70 || st.Held != 70 || st.Scheduled != 0 {
		t.Fatalf("stats held %d (by key %d), scheduled %d, %v; want 70 held by their keys' rate", st.Held, st.HeldByKey, st.Scheduled, err)
	}
	def := job.RateLimit{Count: 3, Per: time.Second, Strict: true}
	hk, err := tb.b.HeldKeys(tb.ctx, "q", 3)
	if err != nil || hk.Holding != 10 || hk.DefaultRate != def || len(hk.Keys) != 3 {
		t.Fatalf("held keys %+v, %v; want 10 holding, the default rate", hk, err)
	}
	for _, k := range hk.Keys {
		if k.Held != 7 || k.Reason != "rate" || !k.WaitsForToken || k.Rate != def || k.OwnRate {
			t.Errorf("held key %+v: want 7 held for want of a token under the default", k)
		}
	}
	info, err := tb.b.Job(tb.ctx, "q", "k04.09")
	if err != nil || info.State != job.StateScheduled || info.Attempts != 0 {
		t.Fatalf("held job: %+v, %v", info, err)
	}
	if res := tb.claim(t, 200); len(res.Jobs) != 0 {
		t.Fatalf("out of tokens claimed %v", ids(res.Jobs))
	}
	tb.clock.Advance(999 * time.Millisecond)
	if res := tb.claim(t, 200); len(res.Jobs) != 0 {
		t.Fatalf("1 ms before the window ends claimed %v", ids(res.Jobs))
	}
	tb.clock.Advance(time.Millisecond)
	res = tb.claim(t, 200)
	if got := byKey(res.Jobs); len(res.Jobs) != 30 || got["k07"] != 3 {
		t.Fatalf("a window on claimed %v, want 3 of each key", ids(res.Jobs))
	}
	for _, c := range res.Jobs {
		if n := c.ID[4:]; n < "03" || n > "05" {
			t.Errorf("claimed %s: want each key's 4th to 6th, in order", c.ID)
		}
	}
	// k03's own limit: at once, for the jobs it holds.
	wake, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
	defer stop()
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "k03", job.RateLimit{Count: 10, Per: time.Second, Strict: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up notice after a key's limit was set")
	}
	res = tb.claim(t, 200)
	if strings.Join(ids(res.Jobs), ",") != "k03.06,k03.07,k03.08,k03.09" {
		t.Fatalf("after k03's own limit of 10 claimed %v, want its 4 held jobs", ids(res.Jobs))
	}
	// Cleared default: every held job goes back to the schedule.
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "", job.RateLimit{}); err != nil {
		t.Fatal(err)
	}
	res = tb.claim(t, 200)
	if len(res.Jobs) != 36 {
		t.Fatalf("after the default was cleared claimed %d, want the 36 held", len(res.Jobs))
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Held != 0 || st.HeldByKey != 0 {
		t.Fatalf("stats %+v, %v; want none held", st, err)
	}
	for _, name := range []string{"keyheld", "keywait"} {
		if n, _ := tb.rdb.Exists(tb.ctx, keyKey(tb, name)).Result(); n != 0 {
			t.Errorf("%s left after every held job went back", name)
		}
	}
}

// TestKeyRateGCRA: a GCRA limit of 10 per second (burst 2) per key starts
// 2 at once, then one every 100 ms, whatever the claims' timing; the
// claims' next says when.
func TestKeyRateGCRA(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	keyedJobs(t, tb, 3, 20, 0)
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 10, Per: time.Second, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	start := tb.clock.Now()
	starts := map[string][]time.Duration{}
	for tb.clock.Now().Sub(start) < 1500*time.Millisecond {
		res := tb.claim(t, 100)
		for _, c := range res.Jobs {
			k, _, _ := strings.Cut(c.ID, ".")
			starts[k] = append(starts[k], tb.clock.Now().Sub(start))
		}
		if res.Next.IsZero() || res.Next.Before(tb.clock.Now()) {
			t.Fatalf("next %v at %v", res.Next, tb.clock.Now())
		}
		tb.clock.Advance(min(res.Next.Sub(tb.clock.Now()), 37*time.Millisecond))
	}
	for k := range 3 {
		s := starts[fmt.Sprintf("k%02d", k)]
		// 2 at 0, then one per 100 ms: 16 by 1.5 s.
		if len(s) < 15 || len(s) > 16 || s[0] != 0 || s[1] != 0 {
			t.Fatalf("key k%02d started at %v", k, s)
		}
		for i := 2; i < len(s); i++ {
			if s[i]-s[i-2] < 100*time.Millisecond {
				t.Fatalf("key k%02d: starts %v and %v closer than the rate allows", k, s[i-2], s[i])
			}
		}
	}
}

// TestKeyRateStrictWindow: claims at random times under a strict limit of
// 4 per 500 ms (+20 ms slack) per key, some keys with their own limit of
// 7: no window of 520 ms ever holds more claims of a key than its limit,
// and each key starts nearly as many as its limit allows.
func TestKeyRateStrictWindow(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	keyedJobs(t, tb, 8, 60, 0)
	def := job.RateLimit{Count: 4, Per: 500 * time.Millisecond, Strict: true, Slack: 20 * time.Millisecond}
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "", def); err != nil {
		t.Fatal(err)
	}
	own := def
	own.Count = 7
	for _, k := range []string{"k01", "k05"} {
		if err := tb.b.SetKeyRateLimit(tb.ctx, "q", k, own); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(7, 37))
	start := tb.clock.Now()
	starts := map[string][]time.Duration{}
	for tb.clock.Now().Sub(start) < 5*time.Second {
		for _, c := range tb.claim(t, 1+rng.IntN(12)).Jobs {
			k, _, _ := strings.Cut(c.ID, ".")
			starts[k] = append(starts[k], tb.clock.Now().Sub(start))
		}
		tb.clock.Advance(time.Duration(rng.IntN(90)) * time.Millisecond)
	}
	const window = 520 * time.Millisecond
	for k := range 8 {
		key := fmt.Sprintf("k%02d", k)
		limit := 4
		if key == "k01" || key == "k05" {
			limit = 7
		}
		s := starts[key]
		for i := range s {
			j := i
			for j < len(s) && s[j]-s[i] < window {
				j++
			}
			if j-i > limit {
				t.Fatalf("key %s: %d claims in the %v from %v, over its %d", key, j-i, window, s[i], limit)
			}
		}
		// 5 s is 9.6 windows, each followed by a claim 0-90 ms on: at
		// least 7 full windows' worth, the claims' n shared by 8 keys.
		if len(s) < 7*limit {
			t.Errorf("key %s: %d claims in 5 s under %d per %v", key, len(s), limit, window)
		}
	}
}

// TestKeyRateWithCapAndPause: a job held by its key's cap or pause spends
// no token of its key's rate; a paused key leaves the keys waiting for a
// token, and its resume sends its jobs back.
func TestKeyRateWithCapAndPause(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	keyedJobs(t, tb, 2, 6, 0)
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 3, Per: time.Second, Strict: true}); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "k00", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.PauseKey(tb.ctx, "q", "k01"); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 100)
	if strings.Join(ids(res.Jobs), ",") != "k00.00" {
		t.Fatalf("claimed %v, want k00's first alone (k00 capped at 1, k01 paused)", ids(res.Jobs))
	}
	hk, err := tb.b.HeldKeys(tb.ctx, "q", 10)
	if err != nil || len(hk.Keys) != 2 {
		t.Fatalf("held keys %+v, %v", hk, err)
	}
	for _, k := range hk.Keys {
		if want := map[string]string{"k00": "cap", "k01": "paused"}[k.Key]; k.Reason != want || k.WaitsForToken {
			t.Errorf("held key %+v: want reason %q and no wait for a token", k, want)
		}
	}
	// k00's job ends: its next starts at once, its rate had tokens left.
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	res = tb.claim(t, 100)
	if strings.Join(ids(res.Jobs), ",") != "k00.01" {
		t.Fatalf("after the ack claimed %v, want k00.01", ids(res.Jobs))
	}
	// k01 resumed: 3 of its jobs start, none of its tokens went to its
	// held jobs while paused.
	if _, err := tb.b.ResumeKey(tb.ctx, "q", "k01"); err != nil {
		t.Fatal(err)
	}
	res = tb.claim(t, 100)
	if got := byKey(res.Jobs); got["k01"] != 3 || got["k00"] != 0 {
		t.Fatalf("after k01's resume claimed %v, want 3 of k01", ids(res.Jobs))
	}
}

// TestKeyRateBadInput: bad limits, keys and queue names are refused with
// job.ErrInvalid and change nothing.
func TestKeyRateBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	keyedJobs(t, tb, 1, 3, 0)
	good := job.RateLimit{Count: 1, Per: time.Second}
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "k00", good); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		queue, key string
		r          job.RateLimit
	}{
		"negative count":     {"q", "k00", job.RateLimit{Count: -1, Per: time.Second}},
		"period under 1ms":   {"q", "k00", job.RateLimit{Count: 1, Per: time.Microsecond}},
		"strict with burst":  {"q", "", job.RateLimit{Count: 2, Per: time.Second, Strict: true, Burst: 2}},
		"slack, not strict":  {"q", "", job.RateLimit{Count: 2, Per: time.Second, Slack: time.Millisecond}},
		"bad key":            {"q", "a b", good},
		"bad queue":          {"", "k00", good},
		"key with a newline": {"q", "k\n", good},
	} {
		err := tb.b.SetKeyRateLimit(tb.ctx, c.queue, c.key, c.r)
		if !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: %v, want job.ErrInvalid", name, err)
		}
	}
	own, err := tb.rdb.HGetAll(tb.ctx, keyKey(tb, "keyrates")).Result()
	if err != nil || len(own) != 1 || own["k00"] != "1/1000/1/1" {
		t.Fatalf("keyrates %v, %v: a refused call changed it", own, err)
	}
	if v, _ := tb.rdb.HGet(tb.ctx, tb.key("q", "controls"), "kr").Result(); v != "-" {
		t.Fatalf("controls kr = %q, want \"-\" (only a key's own limit)", v)
	}
}

// TestKeyRateShards: on a queue of 4 shards, a strict limit of 8 per
// second for one key gives each shard 2, so the key starts at most 8 in
// a second over all shards.
func TestKeyRateShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.sharded(t, 4)
	keyedJobs(t, tb, 1, 40, 0)
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "k00", job.RateLimit{Count: 3, Per: time.Second, Strict: true}); err == nil {
		t.Fatal("a strict limit of 3 on 4 shards was taken")
	}
	if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "k00", job.RateLimit{Count: 8, Per: time.Second, Strict: true}); err != nil {
		t.Fatal(err)
	}
	var all []protocol.Claimed
	for range 10 {
		all = append(all, tb.claim(t, 100).Jobs...)
	}
	if len(all) != 8 {
		t.Fatalf("claimed %d in one instant over 4 shards, want 8", len(all))
	}
	tb.clock.Advance(time.Second)
	all = tb.claim(t, 100).Jobs
	if len(all) != 8 || slices.ContainsFunc(all, func(c protocol.Claimed) bool { return !strings.HasPrefix(c.ID, "k00.") }) {
		t.Fatalf("a second on claimed %v", ids(all))
	}
}

// TestKeyRateClaimCost: under a per-key rate limit a claim's Redis work
// grows with the distinct keys of its due jobs, not with its jobs: a
// claim of 100 jobs of one key runs the same commands as one of 10 jobs
// of that key, and each more key costs a fixed few (GCRA: its state's
// TYPE check, GET and SET; strict: the log's TYPE check, trim, count,
// ZADD and PEXPIRE). A key that holds jobs adds its held set's entries
// and one member of keywait.
func TestKeyRateClaimCost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	clk := clock.NewSimulated(epoch)
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	drv := testkit.Drive(b)
	claim := func(queue string, jobs, keys int, r job.RateLimit) map[string]int {
		t.Helper()
		var envs []*job.Envelope
		for i := range jobs {
			e := env(fmt.Sprintf("%s-%d", queue, i), 0)
			e.Queue, e.Key = queue, fmt.Sprintf("key%03d", i%keys)
			envs = append(envs, e)
		}
		if err := b.Enqueue(ctx, envs...); err != nil {
			t.Fatal(err)
		}
		if err := b.SetKeyRateLimit(ctx, queue, "", r); err != nil {
			t.Fatal(err)
		}
		// Warm up: the queue known, the scripts loaded.
		if _, err := drv.Claim(ctx, queue, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
		return commandsOf(t, ctx, rdb, func() error {
			res, err := drv.Claim(ctx, queue, 100, time.Minute)
			if err == nil && len(res.Jobs) != jobs {
				err = fmt.Errorf("claimed %d of %d", len(res.Jobs), jobs)
			}
			return err
		})
	}
	total := func(m map[string]int) (n int) {
		for _, c := range m {
			n += c
		}
		return n
	}
	for _, c := range []struct {
		name   string
		r      job.RateLimit
		perKey map[string]int
	}{
		{"gcra", job.RateLimit{Count: 1000, Per: time.Second, Burst: 1000}, map[string]int{"type": 1, "get": 1, "set": 1}},
		{"strict", job.RateLimit{Count: 1000, Per: time.Second, Strict: true}, map[string]int{"type": 1, "zremrangebyscore": 1, "zcard": 1, "zadd": 1, "pexpire": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			few, many := claim(c.name+"-few", 10, 1, c.r), claim(c.name+"-many", 100, 1, c.r)
			if !maps.Equal(few, many) {
				t.Errorf("10 jobs of one key: %v\n100 jobs of one key: %v; want the same commands", few, many)
			}
			keyed := claim(c.name+"-keys", 100, 100, c.r)
			for cmd, n := range c.perKey {
				if d := keyed[cmd] - many[cmd]; d != 99*n {
					t.Errorf("%s: %d more for 99 more keys, want %d", cmd, d, 99*n)
				}
			}
			if d, want := total(keyed)-total(many), 99*total(c.perKey); d != want {
				t.Errorf("%d more commands for 99 more keys, want %d (%v against %v)", d, want, keyed, many)
			}
		})
	}
}

// TestKeyRateTokensLeftAfterASmallClaim: a key woken with more tokens than
// the claim has room for keeps them: the next claim, a millisecond later,
// starts its next held job, not a window later.
func TestKeyRateTokensLeftAfterASmallClaim(t *testing.T) {
	t.Parallel()
	for _, r := range []job.RateLimit{
		{Count: 2, Per: time.Second, Strict: true},
		{Count: 2, Per: time.Second, Burst: 2},
	} {
		t.Run(r.String(), func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			keyedJobs(t, tb, 1, 10, 0)
			if err := tb.b.SetKeyRateLimit(tb.ctx, "q", "", r); err != nil {
				t.Fatal(err)
			}
			if res := tb.claim(t, 100); len(res.Jobs) != 2 {
				t.Fatalf("first claim took %v, want the 2 of the burst", ids(res.Jobs))
			}
			tb.clock.Advance(1100 * time.Millisecond) // two tokens again
			res := tb.claim(t, 1)
			if strings.Join(ids(res.Jobs), ",") != "k00.02" {
				t.Fatalf("a claim of 1 took %v, want k00.02", ids(res.Jobs))
			}
			if !res.Next.Before(tb.clock.Now().Add(10 * time.Millisecond)) {
				t.Fatalf("next %v after a claim that left a token, want at once", res.Next.Sub(tb.clock.Now()))
			}
			tb.clock.Advance(2 * time.Millisecond)
			if res := tb.claim(t, 1); strings.Join(ids(res.Jobs), ",") != "k00.03" {
				t.Fatalf("the next claim took %v, want k00.03 on the token left", ids(res.Jobs))
			}
		})
	}
}
