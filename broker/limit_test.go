package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

func TestQueueRateLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for i := range 20 {
		tb.enqueue(t, env("j"+string(rune('a'+i)), 0))
	}
	if err := tb.b.SetRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 10, Per: time.Second, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	if res := tb.claim(t, 100); len(res.Jobs) != 2 {
		t.Fatalf("claimed %d, want the burst of 2", len(res.Jobs))
	}
	res := tb.claim(t, 100)
	if len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(100*time.Millisecond)) {
		t.Fatalf("over the limit: claimed %d, next %v; want none until the next token at +100ms", len(res.Jobs), res.Next.Sub(epoch))
	}
	tb.clock.Advance(100 * time.Millisecond)
	if res := tb.claim(t, 100); len(res.Jobs) != 1 {
		t.Fatalf("one token later claimed %d, want 1", len(res.Jobs))
	}
	tb.clock.Advance(time.Second)
	if res := tb.claim(t, 100); len(res.Jobs) != 2 {
		t.Fatalf("after a quiet second claimed %d, want the burst of 2", len(res.Jobs))
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.RateLimits[""] != (job.RateLimit{Count: 10, Per: time.Second, Burst: 2}) || st.Scheduled != 15 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	// Cleared: everything due is claimed.
	if err := tb.b.SetRateLimit(tb.ctx, "q", "", job.RateLimit{}); err != nil {
		t.Fatal(err)
	}
	if res := tb.claim(t, 100); len(res.Jobs) != 15 {
		t.Fatalf("without the limit claimed %d, want 15", len(res.Jobs))
	}
}

func TestTypeRateLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sms := func(id string) *job.Envelope { e := env(id, 0); e.Type = "sms.send"; return e }
	tb.enqueue(t, sms("s1"), sms("s2"), env("m1", 0), sms("s3"), env("m2", 0))
	if err := tb.b.SetRateLimit(tb.ctx, "q", "sms.send", job.RateLimit{Count: 1, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "m1,m2,s1" {
		t.Fatalf("claimed %q, want one sms and the others", got)
	}
	// The others are held for their tokens, one a second, with their ready
	// times and no attempt spent; the workers sleep until the next token.
	for _, id := range []string{"s2", "s3"} {
		info, err := tb.b.Job(tb.ctx, "q", id)
		if err != nil || info.State != job.StateScheduled || !info.ReadyAt.Equal(epoch) || info.Attempts != 0 {
			t.Fatalf("%s: %+v, %v; want scheduled, its ready time kept, no attempt", id, info, err)
		}
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(time.Second)) {
		t.Fatalf("claimed %v next %v", ids(res.Jobs), res.Next)
	}
	tb.clock.Advance(time.Second)
	res = tb.claim(t, 10)
	if strings.Join(ids(res.Jobs), ",") != "s2" || !res.Jobs[0].ReadyAt.Equal(epoch) || !res.Next.Equal(epoch.Add(2*time.Second)) {
		t.Fatalf("a second later claimed %v (next %v), want s2 with its ready time, s3 at the next token", ids(res.Jobs), res.Next)
	}
	tb.clock.Advance(time.Second)
	if res := tb.claim(t, 10); strings.Join(ids(res.Jobs), ",") != "s3" || !res.Next.IsZero() {
		t.Fatalf("two seconds later claimed %v (next %v), want s3 and nothing left", ids(res.Jobs), res.Next)
	}
	for _, r := range []job.RateLimit{{Count: -1}, {Count: 1, Per: 0}, {Count: 1, Per: time.Second, Burst: -1}} {
		if err := tb.b.SetRateLimit(tb.ctx, "q", "", r); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", r, err)
		}
	}
	if err := tb.b.SetRateLimit(tb.ctx, "q", "bad type", job.RateLimit{Count: 1, Per: time.Second}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("bad type: %v", err)
	}
}

// TestRateLimitChangeReleasesWaiting: a change of limit (cleared, raised)
// takes effect at once for the jobs it already holds, which keep their
// ready times; the queue's workers are woken.
func TestRateLimitChangeReleasesWaiting(t *testing.T) {
	t.Parallel()
	const n = 30
	hold := func(t *testing.T) *testBundle {
		tb := setup(t)
		for i := range n {
			e := env(fmt.Sprintf("s%02d", i), time.Duration(i)*time.Millisecond)
			e.Type = "sms.send"
			tb.enqueue(t, e)
		}
		tb.clock.Advance(time.Second) // all due, the oldest 1 s late
		if err := tb.b.SetRateLimit(tb.ctx, "q", "sms.send", job.RateLimit{Count: 1, Per: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if res := tb.claim(t, 100); strings.Join(ids(res.Jobs), ",") != "s00" {
			t.Fatalf("under 1/min claimed %v, want s00", ids(res.Jobs))
		}
		if res := tb.claim(t, 100); len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(61*time.Second)) {
			t.Fatalf("claimed %v, next %v; want none until the next token in a minute", ids(res.Jobs), res.Next.Sub(epoch))
		}
		return tb
	}
	// drain claims until every held job is out, advancing the clock by
	// step between claims; it checks their order and ready times and
	// returns how long it took.
	drain := func(t *testing.T, tb *testBundle, step time.Duration) time.Duration {
		start := tb.clock.Now()
		var got []string
		for len(got) < n-1 && tb.clock.Now().Sub(start) < 2*time.Minute {
			res := tb.claim(t, 100)
			for _, c := range res.Jobs {
				i := len(got) + 1
				if want := fmt.Sprintf("s%02d", i); c.ID != want || !c.ReadyAt.Equal(epoch.Add(time.Duration(i)*time.Millisecond)) {
					t.Fatalf("claimed %s ready at %v as number %d, want %s ready at +%dms", c.ID, c.ReadyAt.Sub(epoch), i, want, i)
				}
				got = append(got, c.ID)
			}
			if len(got) < n-1 {
				tb.clock.Advance(step)
			}
		}
		if len(got) != n-1 {
			t.Fatalf("claimed %d of the %d held jobs", len(got), n-1)
		}
		return tb.clock.Now().Sub(start)
	}
	wakes := func(t *testing.T, tb *testBundle) func() {
		wake, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
		return func() {
			defer stop()
			select {
			case <-wake:
			case <-time.After(5 * time.Second):
				t.Fatal("no wake-up notice after the limit changed")
			}
		}
	}
	t.Run("cleared", func(t *testing.T) {
		t.Parallel()
		tb := hold(t)
		woken := wakes(t, tb)
		if err := tb.b.SetRateLimit(tb.ctx, "q", "sms.send", job.RateLimit{}); err != nil {
			t.Fatal(err)
		}
		woken()
		if took := drain(t, tb, 10*time.Millisecond); took != 0 {
			t.Fatalf("cleared: the held jobs took %v, want all at once", took)
		}
	})
	t.Run("raised", func(t *testing.T) {
		t.Parallel()
		tb := hold(t)
		woken := wakes(t, tb)
		if err := tb.b.SetRateLimit(tb.ctx, "q", "sms.send", job.RateLimit{Count: 100, Per: time.Second}); err != nil {
			t.Fatal(err)
		}
		woken()
		if res := tb.claim(t, 100); len(res.Jobs) != 0 || !res.Next.Equal(tb.clock.Now().Add(10*time.Millisecond)) {
			t.Fatalf("raised: claimed %v, next %v; want the new limit's next token in 10ms", ids(res.Jobs), res.Next.Sub(tb.clock.Now()))
		}
		if took := drain(t, tb, 10*time.Millisecond); took > (n-1)*10*time.Millisecond {
			t.Fatalf("raised to 100/s: the %d held jobs took %v, want one every 10ms", n-1, took)
		}
	})
	t.Run("queue raised", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		for i := range 5 {
			tb.enqueue(t, env(fmt.Sprintf("j%d", i), 0))
		}
		if err := tb.b.SetRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 1, Per: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if res := tb.claim(t, 10); len(res.Jobs) != 1 {
			t.Fatalf("under 1/min claimed %d, want 1", len(res.Jobs))
		}
		if res := tb.claim(t, 10); len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(time.Minute)) {
			t.Fatalf("claimed %d, next %v; want none for a minute", len(res.Jobs), res.Next.Sub(epoch))
		}
		woken := wakes(t, tb)
		if err := tb.b.SetRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 100, Per: time.Second}); err != nil {
			t.Fatal(err)
		}
		woken()
		if res := tb.claim(t, 10); len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(10*time.Millisecond)) {
			t.Fatalf("raised: claimed %d, next %v; want the new limit's next token at +10ms", len(res.Jobs), res.Next.Sub(epoch))
		}
		for i := range 4 {
			tb.clock.Advance(10 * time.Millisecond)
			if res := tb.claim(t, 10); len(res.Jobs) != 1 {
				t.Fatalf("raised, +%dms: claimed %d, want 1", 10*(i+1), len(res.Jobs))
			}
		}
	})
}

// TestRateLimitHeldJobsStayDue: jobs held by a type's rate limit are
// claimed in the order of their ready times, whatever the claims' sizes,
// while other types' jobs pass them; Stats count them as due, with their
// real lateness, and name the type whose limit holds them.
func TestRateLimitHeldJobsStayDue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const n = 60
	var envs []*job.Envelope
	for i := range n {
		e := env(fmt.Sprintf("s%02d", i), time.Duration(i)*10*time.Millisecond)
		e.Type = "sms.send"
		envs = append(envs, e, env(fmt.Sprintf("m%02d", i), time.Duration(i)*10*time.Millisecond))
	}
	tb.enqueue(t, envs...)
	tb.clock.Advance(time.Second) // all due, the oldest 1 s late
	if err := tb.b.SetRateLimit(tb.ctx, "q", "sms.send", job.RateLimit{Count: 10, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	var sms []string
	others, checked := 0, false
	for step := 0; len(sms) < n; step++ {
		res := tb.claim(t, 1+step%7)
		for _, c := range res.Jobs {
			if strings.HasPrefix(c.ID, "s") {
				i := len(sms)
				if want := fmt.Sprintf("s%02d", i); c.ID != want || !c.ReadyAt.Equal(epoch.Add(time.Duration(i)*10*time.Millisecond)) || c.Attempt != 1 {
					t.Fatalf("claimed %s (ready +%v, attempt %d) as sms number %d, want %s at +%dms, attempt 1", c.ID, c.ReadyAt.Sub(epoch), c.Attempt, i, want, i*10)
				}
				sms = append(sms, c.ID)
			} else {
				others++
			}
		}
		if others == n && !checked {
			// Every other job has started; the sms wait for tokens.
			checked = true
			st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
			if err != nil {
				t.Fatal(err)
			}
			waiting := int64(n - len(sms))
			oldest := epoch.Add(time.Duration(len(sms)) * 10 * time.Millisecond)
			if st.Due != waiting || st.Scheduled != waiting || st.HeldByRate["sms.send"] != waiting || st.Held != 0 ||
				!st.OldestDue.Equal(oldest) || st.Now.Sub(st.OldestDue) != tb.clock.Now().Sub(oldest) {
				t.Fatalf("stats %+v (others claimed %d); want %d due and held by the rate of sms.send, lateness %v", st, others, waiting, tb.clock.Now().Sub(oldest))
			}
		}
		if len(res.Jobs) == 0 {
			if res.Next.IsZero() || !res.Next.After(res.Now) {
				t.Fatalf("step %d: nothing claimed and next %v: a worker would spin", step, res.Next)
			}
			tb.clock.Advance(res.Next.Sub(res.Now))
		}
	}
	if !checked {
		t.Fatal("the stats were never read while sms jobs waited")
	}
	// The history counts the held jobs, and their lateness from their
	// ready times: the last sms waited from +590ms to its claim.
	hist, err := tb.b.History(tb.ctx, []string{"q"}, epoch, tb.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	var claimed, held int64
	var lateMax time.Duration
	for _, m := range hist[0] {
		claimed, held, lateMax = claimed+m.Claimed, held+m.RateHeld, max(lateMax, m.LatenessMax)
	}
	if last := tb.clock.Now().Sub(epoch.Add((n - 1) * 10 * time.Millisecond)); claimed != 2*n || held < n/2 || held >= n || lateMax != last {
		t.Fatalf("history: %d claimed, %d held by the rate, lateness max %v; want %d, most sms, %v", claimed, held, lateMax, 2*n, last)
	}
	if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); st.Due != 0 || len(st.HeldByRate) != 0 {
		t.Fatalf("after the drain: stats %+v", st)
	}
}

// TestStrictRateLimitWindow: under a strict limit no window of Per (+
// Slack) holds more than Count claims, whatever the claims' sizes and
// times (simulated clock), for the queue, a type and a sharded queue;
// the claims keep up the rate; bad input is refused.
func TestStrictRateLimitWindow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		shards int
		typ    string
		limit  job.RateLimit
	}{
		{"queue", 1, "", job.RateLimit{Count: 5, Per: time.Second, Strict: true}},
		{"type with slack", 1, "sms.send", job.RateLimit{Count: 3, Per: time.Second, Strict: true, Slack: 100 * time.Millisecond}},
		{"sharded", 3, "", job.RateLimit{Count: 5, Per: time.Second, Strict: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			if err := tb.b.DeclareQueue(tb.ctx, "q", c.shards); err != nil {
				t.Fatal(err)
			}
			var envs []*job.Envelope
			for i := range 300 {
				e := env(fmt.Sprintf("j%03d", i), 0)
				if c.typ != "" {
					e.Type = c.typ
				}
				envs = append(envs, e)
			}
			tb.enqueue(t, envs...)
			if err := tb.b.SetRateLimit(tb.ctx, "q", c.typ, c.limit); err != nil {
				t.Fatal(err)
			}
			if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.RateLimits[c.typ] != c.limit {
				t.Fatalf("stats show %+v, %v; want %+v", st.RateLimits, err, c.limit)
			}
			rng := rand.New(rand.NewPCG(1, uint64(c.shards)))
			var at []time.Time // claim times, in order
			const run = 20 * time.Second
			for tb.clock.Now().Sub(epoch) < run {
				res := tb.claim(t, 1+rng.IntN(8))
				for range res.Jobs {
					at = append(at, tb.clock.Now())
				}
				tb.clock.Advance(time.Duration(rng.IntN(250)) * time.Millisecond)
			}
			window := c.limit.Per + c.limit.Slack
			for i := range at {
				in := 0
				for j := i; j < len(at) && at[j].Sub(at[i]) < window; j++ {
					in++
				}
				if in > c.limit.Count {
					t.Fatalf("%d claims in the window of %v from +%v, limit %d", in, window, at[i].Sub(epoch), c.limit.Count)
				}
			}
			// The window lets through Count per window, less the time a
			// freed slot waits for the next claim (up to 250 ms here).
			if want := int(float64(c.limit.Count) * float64(run) / float64(window+250*time.Millisecond)); len(at) < want {
				t.Fatalf("%d claims in %v, want at least %d", len(at), run, want)
			}
		})
	}
	t.Run("next", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		for i := range 5 {
			tb.enqueue(t, env(fmt.Sprintf("j%d", i), 0))
		}
		if err := tb.b.SetRateLimit(tb.ctx, "q", "", job.RateLimit{Count: 2, Per: time.Second, Strict: true}); err != nil {
			t.Fatal(err)
		}
		if res := tb.claim(t, 1); len(res.Jobs) != 1 {
			t.Fatalf("claimed %d", len(res.Jobs))
		}
		tb.clock.Advance(300 * time.Millisecond)
		if res := tb.claim(t, 10); len(res.Jobs) != 1 || !res.Next.Equal(epoch.Add(time.Second)) {
			t.Fatalf("claimed %d, next %v; want 1 and the window's first slot back at +1s", len(res.Jobs), res.Next.Sub(epoch))
		}
		tb.clock.Advance(699 * time.Millisecond)
		if res := tb.claim(t, 10); len(res.Jobs) != 0 {
			t.Fatalf("1 ms before the first claim left the window: claimed %d", len(res.Jobs))
		}
		tb.clock.Advance(time.Millisecond)
		if res := tb.claim(t, 10); len(res.Jobs) != 1 || !res.Next.Equal(epoch.Add(1300*time.Millisecond)) {
			t.Fatalf("claimed %d, next %v; want 1, then the second slot at +1.3s", len(res.Jobs), res.Next.Sub(epoch))
		}
	})
	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		if err := tb.b.DeclareQueue(tb.ctx, "q", 3); err != nil {
			t.Fatal(err)
		}
		for _, r := range []job.RateLimit{
			{Count: 10, Per: time.Second, Strict: true, Burst: 5},
			{Count: 10, Per: time.Second, Slack: time.Millisecond},
			{Count: 10, Per: time.Second, Strict: true, Slack: -time.Millisecond},
			{Count: 2, Per: time.Second, Strict: true}, // below the 3 shards
		} {
			if err := tb.b.SetRateLimit(tb.ctx, "q", "", r); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("%+v: %v, want ErrInvalid", r, err)
			}
		}
		if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || len(st.RateLimits) != 0 {
			t.Fatalf("after refused limits: %+v, %v", st.RateLimits, err)
		}
	})
}
