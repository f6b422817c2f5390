package periodic

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

type reportArgs struct {
	Kind string `json:"kind"`
}

var reportType = job.New[reportArgs]("report.build", job.Queue("reports"))

// simulated is a test's broker and clock: the broker's scripts read the
// simulated clock too.
type simulated struct {
	tb  *testkit.Bundle
	clk *clock.Simulated
}

func newSimulated(t *testing.T, start time.Time) *simulated {
	clk := clock.NewSimulated(start)
	tb := testkit.Setup(t)
	protocol.UseClock(tb.B, clk.Now)
	return &simulated{tb: tb, clk: clk}
}

// scheduler returns a started scheduler on the simulated clock whose
// heartbeat never comes by itself; add declares its schedules.
func (sim *simulated) scheduler(t *testing.T, cfg Options, add func(s *Scheduler)) *Scheduler {
	t.Helper()
	cfg.Clock = sim.clk.Now
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 1000 * time.Hour
	}
	s, err := New(sim.tb.B, cfg)
	if err != nil {
		t.Fatal(err)
	}
	add(s)
	s.started = true
	if err := s.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func mustAdd(t *testing.T, s *Scheduler, name, spec string, opts ...Option) {
	t.Helper()
	if err := Add(s, name, spec, reportType, reportArgs{Kind: name}, opts...); err != nil {
		t.Fatal(err)
	}
}

// step runs one step of each scheduler in a random order.
func (sim *simulated) step(t *testing.T, ss ...*Scheduler) {
	t.Helper()
	for _, i := range rand.Perm(len(ss)) {
		if _, err := ss[i].step(context.Background(), sim.clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

// stepTogether runs one step of each scheduler as if at the same moment:
// each reads where the others are before any of them enqueues (then they
// enqueue in a random order).
func (sim *simulated) stepTogether(t *testing.T, ss ...*Scheduler) {
	t.Helper()
	for _, s := range ss {
		if err := s.catchUp(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range rand.Perm(len(ss)) {
		if _, err := ss[i].enqueueDue(context.Background(), sim.clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

// drain claims and acks every due job of the reports queue, counting them
// by id.
func (sim *simulated) drain(t *testing.T, handled map[string]int) {
	t.Helper()
	sim.drainQueue(t, "reports", handled)
}

// drainQueue claims and acks every due job of queue, counting them by id.
func (sim *simulated) drainQueue(t *testing.T, queue string, handled map[string]int) {
	t.Helper()
	d := testkit.Drive(sim.tb.B)
	for {
		res, err := d.Claim(sim.tb.Ctx, queue, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) == 0 {
			return
		}
		for _, c := range res.Jobs {
			handled[c.ID]++
			// As the worker acks: a job.Unique job is remembered.
			op := protocol.Op{Kind: protocol.OpAck, Lease: c.Lease}
			if c.Envelope != nil && c.Envelope.Unique {
				op.Remember = c.Envelope.UniqueFor
			}
			if r, err := d.Settle(sim.tb.Ctx, op); err != nil || r[0].Err != nil {
				t.Fatalf("ack %s: %v %+v", c.ID, err, r)
			}
		}
	}
}

// pending lists the ids of the jobs in the reports queue, sorted.
func (sim *simulated) pending(t *testing.T) []string {
	t.Helper()
	ids, err := sim.tb.RDB.HKeys(sim.tb.Ctx, sim.tb.Keys("reports").Jobs).Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	return ids
}

// run drives s alone until the clock reaches until, jumping from each
// step to the next wake-up it asks for, and returns the ids enqueued.
func (sim *simulated) run(t *testing.T, s *Scheduler, until time.Time) []string {
	t.Helper()
	for sim.clk.Now().Before(until) {
		wake, err := s.step(context.Background(), sim.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if wake.After(until) {
			wake = until
		}
		sim.clk.Advance(wake.Sub(sim.clk.Now()))
	}
	if _, err := s.step(context.Background(), sim.clk.Now()); err != nil {
		t.Fatal(err)
	}
	return sim.pending(t)
}

// TestSchedulersEnqueueEachTickOnce: three schedulers, one held up for a
// while and one replaced by a fresh process half-way, a drain after every
// second: every tick's job is handled exactly once.
func TestSchedulersEnqueueEachTickOnce(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sim := newSimulated(t, start)
	add := func(s *Scheduler) { mustAdd(t, s, "every-second", "@every 1s") }
	a, b, c := sim.scheduler(t, Options{}, add), sim.scheduler(t, Options{}, add), sim.scheduler(t, Options{}, add)
	handled := map[string]int{}
	const seconds = 120
	for i := range seconds {
		sim.clk.Advance(time.Second)
		switch {
		case i == seconds/2:
			c = sim.scheduler(t, Options{}, add) // restarted
			sim.step(t, a, b, c)
		case i > 20 && i < 40:
			sim.step(t, a, c) // b is held up for 20 s, then catches up
		default:
			sim.step(t, a, b, c)
		}
		sim.drain(t, handled)
	}
	for i := 1; i <= seconds; i++ {
		id := tickID("every-second", start.Add(time.Duration(i)*time.Second))
		if handled[id] != 1 {
			t.Errorf("tick %s handled %d times, want 1", id, handled[id])
		}
	}
	if len(handled) != seconds {
		t.Errorf("%d distinct jobs handled, want %d", len(handled), seconds)
	}
}

// TestMissedTicks: after every scheduler was down, a new one enqueues
// for the ticks missed meanwhile what the schedule's policy says, and at
// most one job unless the policy is RunAll: RunOnce (the default, within
// an hour) the latest missed tick if it is within the window, Skip only a
// tick that is on time (within the Tolerance), RunAll each tick within
// the window.
func TestMissedTicks(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		spec string
		opt  Option
		down time.Duration
		want []string // tick times after the restart
	}{
		{"once (default)", "* * * * *", nil, 10*time.Minute + 10*time.Second, []string{"12:10"}},
		{"once, the latest tick outside the window", "* * * * *", RunMissedOnce(5 * time.Second), 10*time.Minute + 10*time.Second, nil},
		{"skip", "* * * * *", SkipMissed(), 10*time.Minute + 10*time.Second, nil},
		{"skip, the latest tick on time", "* * * * *", SkipMissed(), 10*time.Minute + 2*time.Second, []string{"12:10"}},
		{"all within the window", "* * * * *", RunMissedAll(5 * time.Minute), 10*time.Minute + 10*time.Second, []string{"12:06", "12:07", "12:08", "12:09", "12:10"}},
		{"once, daily, missed tick within the window", "0 3 * * *", RunMissedOnce(12 * time.Hour), 24 * time.Hour, []string{"03:00"}},
		{"once, daily, missed tick outside the window", "0 3 * * *", RunMissedOnce(6 * time.Hour), 24 * time.Hour, nil},
		{"once (default), daily, 9 hours late", "0 3 * * *", nil, 24 * time.Hour, nil},
		{"skip, daily", "0 3 * * *", SkipMissed(), 24 * time.Hour, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSimulated(t, start.Add(-time.Second))
			var opts []Option
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			add := func(s *Scheduler) { mustAdd(t, s, "s", tc.spec, opts...) }
			s := sim.scheduler(t, Options{}, add)
			// The first run records a last tick (forcing one at 12:00 for the daily spec).
			sim.clk.Advance(time.Second)
			if _, err := sim.tb.RDB.ZAdd(sim.tb.Ctx, s.keys.Last, redisZ("s", start)).Result(); err != nil {
				t.Fatal(err)
			}
			sim.clk.Advance(tc.down)
			s = sim.scheduler(t, Options{}, add) // every scheduler was down; a new one starts
			if _, err := s.step(sim.tb.Ctx, sim.clk.Now()); err != nil {
				t.Fatal(err)
			}
			if got := sim.tickTimes(t, "s", "15:04"); !slices.Equal(got, tc.want) {
				t.Errorf("after %s down: jobs for ticks %v, want %v", tc.down, got, tc.want)
			}
		})
	}
}

// tickTimes returns the ticks of the schedule name whose jobs are in the
// reports queue, formatted with layout.
func (sim *simulated) tickTimes(t *testing.T, name, layout string) []string {
	t.Helper()
	var out []string
	for _, id := range sim.pending(t) {
		rest, ok := strings.CutPrefix(id, name+"@")
		if !ok {
			continue
		}
		tick, err := time.Parse(tickLayout, rest)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tick.Format(layout))
	}
	return out
}

// TestCatchUpAfterAScheduleChange: a schedule that ticked every 20
// seconds is deployed as every second 15 s after its last tick. The new
// scheduler enqueues one job for the 15 seconds it was not there (the
// tick due as it starts), not 15; then one per second. RunMissedAll
// enqueues all 15, which is what it is for.
func TestCatchUpAfterAScheduleChange(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		opts    []Option
		catchUp int
	}{
		{"once (default)", nil, 1},
		{"skip", []Option{SkipMissed()}, 1},
		{"all within a minute", []Option{RunMissedAll(time.Minute)}, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSimulated(t, start)
			old := sim.scheduler(t, Options{}, func(s *Scheduler) { mustAdd(t, s, "report", "*/20 * * * * *", tc.opts...) })
			for range 60 {
				sim.clk.Advance(time.Second)
				sim.step(t, old)
			}
			want := []string{"03:04:20", "03:04:40", "03:05:00"}
			if got := sim.tickTimes(t, "report", "15:04:05"); !slices.Equal(got, want) {
				t.Fatalf("the old deploy enqueued %v, want %v", got, want)
			}
			// The old deploy stops at 03:05:00; the new one starts 15 s later.
			sim.clk.Advance(15 * time.Second)
			cur := sim.scheduler(t, Options{}, func(s *Scheduler) { mustAdd(t, s, "report", "* * * * * *", tc.opts...) })
			sim.step(t, cur)
			got := sim.tickTimes(t, "report", "15:04:05")[len(want):]
			if len(got) != tc.catchUp || got[len(got)-1] != "03:05:15" {
				t.Errorf("the new deploy's first step enqueued %v; want %d job(s), the last for 03:05:15", got, tc.catchUp)
			}
			for range 5 {
				sim.clk.Advance(time.Second)
				sim.step(t, cur)
			}
			got = sim.tickTimes(t, "report", "15:04:05")[len(want)+tc.catchUp:]
			if want := []string{"03:05:16", "03:05:17", "03:05:18", "03:05:19", "03:05:20"}; !slices.Equal(got, want) {
				t.Errorf("then %v, want %v", got, want)
			}
		})
	}
}

// TestCatchUpAfterAnOutage: an @every 5s schedule whose scheduler was
// away for a minute (stopped and started again, or stalled) enqueues one
// job for the 12 ticks it missed, under the default policy; a scheduler
// only a little late (within the Tolerance) enqueues each tick it reached.
func TestCatchUpAfterAnOutage(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		restart bool
		away    time.Duration
		want    []string // ticks enqueued by the first step after the outage
	}{
		{"stopped a minute", true, time.Minute + 2*time.Second, []string{"03:05:30"}},
		{"stalled a minute", false, time.Minute + 2*time.Second, []string{"03:05:30"}},
		{"stalled 5.5 s", false, 5500 * time.Millisecond, []string{"03:04:35"}},
		{"held up 4.5 s, every second", false, 0, nil}, // see below
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSimulated(t, start)
			spec := "@every 5s"
			if tc.away == 0 {
				spec = "@every 1s"
			}
			add := func(s *Scheduler) { mustAdd(t, s, "s", spec) }
			s := sim.scheduler(t, Options{}, add)
			for range 30 {
				sim.clk.Advance(time.Second)
				sim.step(t, s)
			}
			before := len(sim.pending(t))
			if before != map[string]int{"@every 5s": 6, "@every 1s": 30}[spec] {
				t.Fatalf("%d jobs in the first 30 s", before)
			}
			if tc.away == 0 {
				// A running every-second scheduler held up 4.5 s (within
				// the 5 s Tolerance): it was there, and enqueues the 4
				// ticks it reached late.
				sim.clk.Advance(4500 * time.Millisecond)
				sim.step(t, s)
				if got := sim.tickTimes(t, "s", "15:04:05")[before:]; !slices.Equal(got, []string{"03:04:31", "03:04:32", "03:04:33", "03:04:34"}) {
					t.Errorf("held up 4.5 s: %v", got)
				}
				return
			}
			sim.clk.Advance(tc.away)
			if tc.restart {
				s = sim.scheduler(t, Options{}, add)
			}
			sim.step(t, s)
			if got := sim.tickTimes(t, "s", "15:04:05")[before:]; !slices.Equal(got, tc.want) {
				t.Errorf("away %s: the first step enqueued %v, want %v", tc.away, got, tc.want)
			}
		})
	}
}

// TestDaylightSavingDays drives a scheduler over the days the clocks
// change in New York: the daily 02:30 job runs once each day, at 03:00 EDT
// on the spring-forward day; a daily 01:30 runs once on the fall-back day.
func TestDaylightSavingDays(t *testing.T) {
	t.Parallel()
	ny := mustZone(t, "America/New_York")
	for _, tc := range []struct {
		name     string
		spec     string
		from, to time.Time
		want     []string
	}{
		{"spring forward", "30 2 * * *", time.Date(2026, 3, 7, 0, 0, 0, 0, ny), time.Date(2026, 3, 10, 0, 0, 0, 0, ny),
			[]string{"s@2026-03-07T07:30:00Z", "s@2026-03-08T07:00:00Z", "s@2026-03-09T06:30:00Z"}},
		{"fall back", "30 1 * * *", time.Date(2026, 10, 31, 0, 0, 0, 0, ny), time.Date(2026, 11, 3, 0, 0, 0, 0, ny),
			[]string{"s@2026-10-31T05:30:00Z", "s@2026-11-01T05:30:00Z", "s@2026-11-02T06:30:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSimulated(t, tc.from)
			s := sim.scheduler(t, Options{}, func(s *Scheduler) { mustAdd(t, s, "s", tc.spec, Location(ny)) })
			if got := sim.run(t, s, tc.to); !slices.Equal(got, tc.want) {
				t.Errorf("jobs %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStaleScheduleIsRemovedNotRun: a schedule that the new deploy no
// longer declares shows as stale once its heartbeat expires, is removed by
// the new deploy's heartbeat, and never gets a job from it.
func TestStaleScheduleIsRemovedNotRun(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sim := newSimulated(t, start)
	cfg := Options{Heartbeat: time.Minute, StaleAfter: 5 * time.Minute}
	old := sim.scheduler(t, cfg, func(s *Scheduler) {
		mustAdd(t, s, "kept", "* * * * *")
		mustAdd(t, s, "dropped", "* * * * *")
	})
	sim.clk.Advance(2 * time.Minute)
	sim.step(t, old)
	// The new deploy: "dropped" is gone from the code.
	sim.clk.Advance(time.Minute)
	cur := sim.scheduler(t, cfg, func(s *Scheduler) { mustAdd(t, s, "kept", "* * * * *") })
	list := func() map[string]Status {
		t.Helper()
		all, err := List(sim.tb.Ctx, sim.tb.B, sim.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]Status{}
		for _, st := range all {
			m[st.Name] = st
		}
		return m
	}
	if st := list(); len(st) != 2 || st["dropped"].Stale || st["kept"].Stale {
		t.Fatalf("right after the deploy: %+v, want both, neither stale", st)
	}
	if err := sim.tb.RDB.Del(sim.tb.Ctx, sim.tb.Keys("reports").Jobs, sim.tb.Keys("reports").Scheduled).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the old deploy's last heartbeat was 6 minutes ago, the new one's 3
		sim.clk.Advance(time.Minute)
		sim.step(t, cur)
	}
	st := list()
	if !st["dropped"].Stale || st["kept"].Stale {
		t.Fatalf("3 minutes later: dropped stale %v, kept stale %v; want true, false", st["dropped"].Stale, st["kept"].Stale)
	}
	for _, id := range sim.pending(t) {
		if id[:len("dropped")] == "dropped" {
			t.Errorf("the stale schedule got job %s", id)
		}
	}
	if err := cur.heartbeat(sim.tb.Ctx); err != nil {
		t.Fatal(err)
	}
	if st := list(); len(st) != 1 || st["kept"].Name != "kept" {
		t.Fatalf("after the heartbeat: %+v, want only kept", st)
	}
	if n, _ := sim.tb.RDB.ZScore(sim.tb.Ctx, cur.keys.Last, "dropped").Result(); n != 0 {
		t.Errorf("the stale schedule's last tick is still stored")
	}
}

func redisZ(name string, t time.Time) redis.Z {
	return redis.Z{Score: float64(t.UnixMilli()), Member: name}
}

// TestTickUniqueAfterItsJobEnded: a tick's job that ended (done or dead)
// is still refused to a late scheduler that does not know it was enqueued
// (the last-tick record lost, as between an enqueue and its record): the
// job is unique for the tolerance and five minutes after it ended.
func TestTickUniqueAfterItsJobEnded(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sim := newSimulated(t, start)
	add := func(s *Scheduler) { mustAdd(t, s, "s", "@every 1s") }
	a := sim.scheduler(t, Options{}, add)
	handled := map[string]int{}
	for range 10 {
		sim.clk.Advance(time.Second)
		sim.step(t, a)
		sim.drain(t, handled)
	}
	if len(handled) != 10 {
		t.Fatalf("%d jobs handled, want 10", len(handled))
	}
	if err := sim.tb.RDB.Del(sim.tb.Ctx, a.keys.Last).Err(); err != nil {
		t.Fatal(err)
	}
	// Held up since the start (running, not restarted, with a Tolerance
	// that makes its 11 ticks on time), and knows of no tick.
	late := sim.scheduler(t, Options{Tolerance: time.Minute}, add)
	late.entries[0].cur, late.entries[0].away = start, false
	sim.clk.Advance(time.Second)
	sim.step(t, late)
	sim.drain(t, handled)
	for id, n := range handled {
		if n != 1 {
			t.Errorf("tick %s handled %d times, want 1", id, n)
		}
	}
	if len(handled) != 11 {
		t.Errorf("%d jobs handled, want 11 (one new tick)", len(handled))
	}
	// Past the window the id is free again (no scheduler tries it by then).
	sim.clk.Advance(late.uniqueness() + time.Minute)
	env, err := reportType.Enqueue(sim.tb.Ctx, sim.tb.B, reportArgs{}, job.ID(tickID("s", start.Add(time.Second))), job.Unique(time.Minute))
	if err != nil {
		t.Fatalf("enqueue after the window: %v (%+v)", err, env)
	}
}

// TestPoisonedScheduleIsSkipped: beside two healthy every-second
// schedules, one whose job expires 2.5 s after the start (an expiry that
// Add accepts) and one whose arguments exceed the broker's payload cap (a
// job only the broker refuses, which refuses the whole call): every tick
// of the healthy ones is enqueued, at its step; the bad ones' ticks are
// skipped, each reported in the log (with its schedule's name and why)
// and as its schedule's last outcome, "refused", which List shows.
func TestPoisonedScheduleIsSkipped(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewSimulated(start)
	tb := testkit.Setup(t, func(o *broker.Options) { o.MaxPayloadBytes = 1000 })
	protocol.UseClock(tb.B, clk.Now)
	sim := &simulated{tb: tb, clk: clk}
	var logs syncBuffer
	logger := zerolog.New(&logs)
	s := sim.scheduler(t, Options{Logger: &logger}, func(s *Scheduler) {
		mustAdd(t, s, "healthy-a", "@every 1s")
		mustAdd(t, s, "expiring", "@every 1s", JobOptions(job.ExpireAt(start.Add(2500*time.Millisecond))))
		if err := Add(s, "too-big", "@every 1s", reportType, reportArgs{Kind: strings.Repeat("x", 2000)}); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, s, "healthy-b", "@every 1s")
	})
	const seconds = 10
	for range seconds {
		sim.clk.Advance(time.Second)
		wake, err := s.step(context.Background(), sim.clk.Now())
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		if want := sim.clk.Now().Add(time.Second); !wake.Equal(want) {
			t.Errorf("step at %s wakes at %s, want %s (the next tick)", sim.clk.Now(), wake, want)
		}
	}
	got := map[string]bool{}
	for _, id := range sim.pending(t) {
		got[id] = true
	}
	for i := 1; i <= seconds; i++ {
		at := start.Add(time.Duration(i) * time.Second)
		for _, name := range []string{"healthy-a", "healthy-b"} {
			if !got[tickID(name, at)] {
				t.Errorf("tick %s not enqueued", tickID(name, at))
			}
		}
		if want := i <= 2; got[tickID("expiring", at)] != want {
			t.Errorf("tick %s enqueued: %v, want %v (the expiry is at +2.5s)", tickID("expiring", at), !want, want)
		}
		if got[tickID("too-big", at)] {
			t.Errorf("tick %s enqueued beyond the payload cap", tickID("too-big", at))
		}
	}
	if len(got) != 2*seconds+2 {
		t.Errorf("%d jobs enqueued, want %d", len(got), 2*seconds+2)
	}

	list, err := List(sim.tb.Ctx, sim.tb.B, sim.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]*LastOutcome{}
	for _, st := range list {
		outcomes[st.Name] = st.Outcome
	}
	last := start.Add(seconds * time.Second)
	for name, why := range map[string]string{"expiring": "expiry 2030-01-02T03:04:07.5Z is not after the ready time", "too-big": "payload and headers of job"} {
		o := outcomes[name]
		if o == nil || o.Result != ResultRefused || !o.Tick.Equal(last) || !strings.Contains(o.Error, why) {
			t.Errorf("%s: last outcome %+v, want refused at tick %s, saying %q", name, o, last, why)
		}
	}
	if outcomes["healthy-a"] != nil || outcomes["healthy-b"] != nil {
		t.Errorf("healthy schedules have outcomes %+v, %+v; want none (no worker ran)", outcomes["healthy-a"], outcomes["healthy-b"])
	}
	// Logged once each (the same reason again within a Heartbeat is not
	// logged again), with the schedule's name and why.
	out := logs.String()
	for name, why := range map[string]string{"expiring": "is not after the ready time", "too-big": "the cap is 1000"} {
		lines := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `"schedule":"`+name+`"`) && strings.Contains(l, why) && strings.Contains(l, `"level":"error"`) {
				lines++
			}
		}
		if lines != 1 {
			t.Errorf("%s: %d log lines saying why, want 1:\n%s", name, lines, out)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestQueueMoveRunsEachTickOnce: a rolling deploy moves a schedule from
// queue qa to qb; old and new schedulers overlap for 30 s, stepping at the
// same moments (each reads the last tick before either enqueues), with
// both queues drained after every second. Each tick runs once, in the
// queue of the first scheduler to reach it. A tick claimed by a scheduler
// that died before its enqueue is enqueued by the other, in the claimed
// queue.
func TestQueueMoveRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sim := newSimulated(t, start)
	declare := func(queue string) func(s *Scheduler) {
		return func(s *Scheduler) { mustAdd(t, s, "mv", "@every 1s", JobOptions(job.Queue(queue))) }
	}
	old := sim.scheduler(t, Options{}, declare("qa"))
	handled := map[string]int{}
	drain := func() {
		sim.drainQueue(t, "qa", handled)
		sim.drainQueue(t, "qb", handled)
	}
	seconds := 0
	second := func(ss ...*Scheduler) {
		seconds++
		sim.clk.Advance(time.Second)
		sim.stepTogether(t, ss...)
		drain()
	}
	for range 5 {
		second(old)
	}
	cur := sim.scheduler(t, Options{}, declare("qb"))
	for range 30 {
		second(old, cur)
	}
	// The old scheduler claims the next tick and dies before enqueueing
	// it: the new one enqueues it into qa.
	sim.clk.Advance(time.Second)
	seconds++
	lost := tickID("mv", sim.clk.Now())
	tk := &tick{e: old.entries[0], at: sim.clk.Now()}
	var err error
	if tk.env, err = tk.e.tickJob(tk.at, sim.clk.Now(), old.uniqueness()); err != nil {
		t.Fatal(err)
	}
	if err := old.claim(sim.tb.Ctx, sim.clk.Now(), []*tick{tk}); err != nil {
		t.Fatal(err)
	}
	sim.step(t, cur)
	if ids, err := sim.tb.RDB.HKeys(sim.tb.Ctx, sim.tb.Keys("qa").Jobs).Result(); err != nil || !slices.Equal(ids, []string{lost}) {
		t.Errorf("qa holds %v (%v), want the dead scheduler's claimed tick %s", ids, err, lost)
	}
	drain()
	for range 5 {
		second(cur)
	}

	for i := 1; i <= seconds; i++ {
		id := tickID("mv", start.Add(time.Duration(i)*time.Second))
		if handled[id] != 1 {
			t.Errorf("tick %s handled %d times, want 1", id, handled[id])
		}
	}
	if len(handled) != seconds {
		t.Errorf("%d distinct jobs handled, want %d", len(handled), seconds)
	}
	// The claims expire: the next heartbeat past their expiry removes them.
	n, err := sim.tb.RDB.HLen(sim.tb.Ctx, cur.keys.Ticks).Result()
	if err != nil || n != int64(seconds) {
		t.Fatalf("%d tick claims stored (%v), want %d", n, err, seconds)
	}
	sim.clk.Advance(defaultMissedWithin + time.Second)
	if err := cur.heartbeat(sim.tb.Ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := sim.tb.RDB.Exists(sim.tb.Ctx, cur.keys.Ticks).Result(); err != nil || n != 0 {
		t.Errorf("the expired claims are still stored (%v)", err)
	}
}

// TestOnlyTheSchedulersJobRecordsAnOutcome: Outcomes records the outcome
// of a tick's job as the scheduler enqueued it (read back from Redis),
// and nothing for a job that forges it: the headers alone, the tick's id
// without the signature, another tick's signature, the signature on
// another queue, another name, a made-up signature. An older tick's
// outcome never replaces a later one's.
func TestOnlyTheSchedulersJobRecordsAnOutcome(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sim := newSimulated(t, start)
	s := sim.scheduler(t, Options{}, func(s *Scheduler) { mustAdd(t, s, "nightly", "@every 1s") })
	for range 2 {
		sim.clk.Advance(time.Second)
		sim.step(t, s)
	}
	t1, t2 := start.Add(time.Second), start.Add(2*time.Second)
	stored := func(at time.Time) *job.Message {
		t.Helper()
		info, err := sim.tb.B.Job(sim.tb.Ctx, "reports", tickID("nightly", at))
		if err != nil || info.Envelope == nil {
			t.Fatalf("the job of tick %s: %v", at, err)
		}
		return &job.Message{Envelope: *info.Envelope, Attempt: 1}
	}
	genuine1, genuine2 := stored(t1), stored(t2)
	if genuine1.Headers[headerSignature] == "" {
		t.Fatalf("the tick's job is not signed: %v", genuine1.Headers)
	}
	handle := func(m *job.Message, err error) {
		t.Helper()
		h := Outcomes(sim.tb.B)(job.HandlerFunc(func(context.Context, *job.Message) error { return err }))
		if got := h.Handle(sim.tb.Ctx, m); got != err {
			t.Fatalf("the handler returned %v through Outcomes, want %v", got, err)
		}
	}
	outcome := func() (*LastOutcome, []string) {
		t.Helper()
		names, err := sim.tb.RDB.HKeys(sim.tb.Ctx, s.keys.Outcomes).Result()
		if err != nil {
			t.Fatal(err)
		}
		list, err := List(sim.tb.Ctx, sim.tb.B, sim.clk.Now())
		if err != nil || len(list) != 1 {
			t.Fatalf("List: %+v, %v", list, err)
		}
		return list[0].Outcome, names
	}

	handle(genuine1, nil)
	if o, _ := outcome(); o == nil || o.Result != ResultSuccess || !o.Tick.Equal(t1) {
		t.Fatalf("after the genuine job of %s: outcome %+v, want success", t1, o)
	}
	forged := errors.New("forged: upstream said no")
	later := start.Add(time.Hour)
	clone := func(m *job.Message, change func(c *job.Message)) *job.Message {
		c := *m
		c.Headers = maps.Clone(m.Headers)
		change(&c)
		return &c
	}
	for name, m := range map[string]*job.Message{
		"the headers alone": {Envelope: job.Envelope{ID: "anything", Queue: "reports", Type: reportType.Name(),
			Headers: map[string]string{headerSchedule: "nightly", headerTick: t2.Format(tickLayout)}}},
		"the tick's id without the signature": clone(genuine2, func(c *job.Message) { delete(c.Headers, headerSignature) }),
		"another tick's signature": clone(genuine1, func(c *job.Message) {
			c.ID, c.Headers[headerTick] = tickID("nightly", later), later.Format(tickLayout)
		}),
		"the signature on another queue": clone(genuine2, func(c *job.Message) { c.Queue = "other" }),
		"another name": clone(genuine2, func(c *job.Message) {
			c.ID, c.Headers[headerSchedule] = tickID("ghost", t2), "ghost"
		}),
		"a made-up signature": clone(genuine2, func(c *job.Message) { c.Headers[headerSignature] = "AAAAAAAAAAAAAAAAAAAAAA" }),
	} {
		handle(m, forged)
		if o, names := outcome(); o == nil || o.Result != ResultSuccess || !o.Tick.Equal(t1) || !slices.Equal(names, []string{"nightly"}) {
			t.Errorf("after a job with %s: outcome %+v, outcomes of %v; want nightly's success at %s alone", name, o, names, t1)
		}
	}

	handle(genuine2, forged)
	if o, _ := outcome(); o == nil || o.Result != ResultFailed || !o.Tick.Equal(t2) || o.Error != forged.Error() {
		t.Fatalf("after the genuine job of %s failed: outcome %+v, want failed", t2, o)
	}
	handle(genuine1, nil)
	if o, _ := outcome(); o == nil || o.Result != ResultFailed || !o.Tick.Equal(t2) {
		t.Errorf("the earlier tick's success replaced the later tick's outcome: %+v", o)
	}
}

// TestUnknownNamesExpire: last ticks and outcomes of names that are no
// schedule (written by hand, or by a job of a removed schedule that ended
// after the removal) are removed by the next heartbeat; those of a
// declared schedule are kept.
func TestUnknownNamesExpire(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sim := newSimulated(t, start)
	s := sim.scheduler(t, Options{}, func(s *Scheduler) { mustAdd(t, s, "nightly", "@every 1s") })
	sim.clk.Advance(time.Second)
	sim.step(t, s)
	rdb, ctx := sim.tb.RDB, sim.tb.Ctx
	body := `{"result":"dead","tick":1,"at":2,"attempt":1}`
	if err := rdb.HSet(ctx, s.keys.Outcomes, "ghost", body, "nightly", body, "other-ghost", body).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, s.keys.Last, redisZ("ghost", start)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if names := rdb.HKeys(ctx, s.keys.Outcomes).Val(); !slices.Equal(names, []string{"nightly"}) {
		t.Errorf("outcomes of %v after the heartbeat, want nightly's alone", names)
	}
	if names := rdb.ZRange(ctx, s.keys.Last, 0, -1).Val(); !slices.Equal(names, []string{"nightly"}) {
		t.Errorf("last ticks of %v after the heartbeat, want nightly's alone", names)
	}
}
