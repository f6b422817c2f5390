package periodic

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/job"
)

// status returns the stored status of the schedule name at the simulated
// clock.
func (sim *simulated) status(t *testing.T, name string) Status {
	t.Helper()
	all, err := List(sim.tb.Ctx, sim.tb.B, sim.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range all {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no schedule %q in %+v", name, all)
	return Status{}
}

// TestPauseStopsTicksAcrossSchedulers: two schedulers run an every-second
// schedule; once it is paused, neither enqueues a tick (nor does a
// scheduler started during the pause), each skipped tick is its last
// outcome "paused"; resumed, the ticks after the resume run, on time, and
// none of the paused ones, also for a scheduler that was held up for the
// whole pause (no flood of missed ticks).
func TestPauseStopsTicksAcrossSchedulers(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sim := newSimulated(t, start)
	add := func(s *Scheduler) {
		mustAdd(t, s, "every-second", "@every 1s", RunMissedAll(time.Hour))
		mustAdd(t, s, "other", "@every 1s")
	}
	a, b := sim.scheduler(t, Options{}, add), sim.scheduler(t, Options{}, add)
	handled := map[string]int{}
	second := func(i int) string { return tickID("every-second", start.Add(time.Duration(i)*time.Second)) }
	for range 3 {
		sim.clk.Advance(time.Second)
		sim.step(t, a, b)
		sim.drain(t, handled)
	}
	// Refused: a name no scheduler declares (it has an outcome only),
	// a bad name; nothing is written.
	if err := sim.tb.RDB.HSet(sim.tb.Ctx, a.keys.Outcomes, "ghost", `{"result":"success"}`).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want error
		text string
	}{
		{"ghost", ErrUnknownSchedule, `cannot pause "ghost": periodic: no such schedule`},
		{"no such", job.ErrInvalid, `schedule name "no such" contains ' '`},
	} {
		if err := setPaused(sim.tb.Ctx, sim.tb.B, tc.name, true, sim.clk.Now()); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("Pause(%q): %v, want %v containing %q", tc.name, err, tc.want, tc.text)
		}
		if err := setPaused(sim.tb.Ctx, sim.tb.B, tc.name, false, sim.clk.Now()); !errors.Is(err, tc.want) {
			t.Errorf("Resume(%q): %v, want %v", tc.name, err, tc.want)
		}
	}
	if n, _ := sim.tb.RDB.Exists(sim.tb.Ctx, a.keys.Paused).Result(); n != 0 {
		t.Fatalf("refused pauses wrote the paused hash")
	}

	pausedAt := sim.clk.Now().Add(300 * time.Millisecond)
	sim.clk.Advance(300 * time.Millisecond)
	if err := setPaused(sim.tb.Ctx, sim.tb.B, "every-second", true, sim.clk.Now()); err != nil {
		t.Fatal(err)
	}
	// Pausing again keeps the first pause.
	sim.clk.Advance(100 * time.Millisecond)
	if err := setPaused(sim.tb.Ctx, sim.tb.B, "every-second", true, sim.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if st := sim.status(t, "every-second"); !st.Paused || !st.PausedAt.Equal(pausedAt) {
		t.Fatalf("after Pause: paused %v since %s, want true since %s", st.Paused, st.PausedAt, pausedAt)
	}
	var c *Scheduler
	for i := 4; i <= 40; i++ {
		sim.set(start.Add(time.Duration(i) * time.Second))
		switch {
		case i == 20:
			c = sim.scheduler(t, Options{}, add) // started during the pause
			sim.step(t, a, c)
		case i > 20:
			sim.step(t, a, c) // b is held up from here until after the resume
		default:
			sim.step(t, a, b)
		}
		sim.drain(t, handled)
		if st := sim.status(t, "every-second"); st.Outcome == nil || st.Outcome.Result != ResultPaused || !st.Outcome.Tick.Equal(start.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("second %d: last outcome %+v, want paused at its tick", i, st.Outcome)
		}
	}
	resumedAt := start.Add(40*time.Second + 500*time.Millisecond)
	sim.set(resumedAt)
	if err := setPaused(sim.tb.Ctx, sim.tb.B, "every-second", false, sim.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if st := sim.status(t, "every-second"); st.Paused || !st.ResumedAt.Equal(resumedAt) {
		t.Fatalf("after Resume: paused %v, resumed %s; want false, %s", st.Paused, st.ResumedAt, resumedAt)
	}
	for i := 41; i <= 45; i++ {
		sim.set(start.Add(time.Duration(i) * time.Second))
		if i == 41 {
			sim.step(t, b) // the held-up one first: nothing tells it of the pause but the resume
		}
		sim.step(t, a, b, c)
		sim.drain(t, handled)
	}
	var got []string
	for id := range handled {
		if strings.HasPrefix(id, "every-second@") {
			got = append(got, id)
		}
	}
	slices.Sort(got)
	want := []string{second(1), second(2), second(3), second(41), second(42), second(43), second(44), second(45)}
	if !slices.Equal(got, want) {
		t.Errorf("handled %v, want %v (none while paused)", got, want)
	}
	for id, n := range handled {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
	}
	// The other schedule ran on.
	if handled[tickID("other", start.Add(30*time.Second))] != 1 {
		t.Errorf("the schedule not paused missed a tick")
	}
	if st := sim.status(t, "every-second"); st.Outcome.Result == ResultPaused && st.Outcome.Tick.After(resumedAt) {
		t.Errorf("a tick after the resume is recorded as paused: %+v", st.Outcome)
	}
}

// TestPauseSurvivesRestarts: a schedule paused while every scheduler was
// down stays paused for the next one, which records the skipped tick; a
// scheduler that starts after the resume runs the missed ticks by the
// schedule's policy counted from the resume, not from the pause.
func TestPauseSurvivesRestarts(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	sim := newSimulated(t, start)
	add := func(s *Scheduler) { mustAdd(t, s, "minutely", "* * * * *", RunMissedAll(time.Hour)) }
	s := sim.scheduler(t, Options{}, add)
	sim.clk.Advance(time.Minute)
	sim.step(t, s) // 03:05 runs
	if err := setPaused(sim.tb.Ctx, sim.tb.B, "minutely", true, sim.clk.Now()); err != nil {
		t.Fatal(err)
	}
	sim.clk.Advance(10 * time.Minute) // all down until 03:15
	s = sim.scheduler(t, Options{}, add)
	sim.step(t, s)
	if st := sim.status(t, "minutely"); !st.Paused || st.Outcome == nil || st.Outcome.Result != ResultPaused || !st.Outcome.Tick.Equal(start.Add(11*time.Minute)) {
		t.Fatalf("after a restart during the pause: %+v, outcome %+v", st, st.Outcome)
	}
	sim.clk.Advance(30 * time.Second) // 03:15:30
	if err := setPaused(sim.tb.Ctx, sim.tb.B, "minutely", false, sim.clk.Now()); err != nil {
		t.Fatal(err)
	}
	sim.clk.Advance(3 * time.Minute) // all down again until 03:18:30
	s = sim.scheduler(t, Options{}, add)
	sim.step(t, s)
	got := sim.pending(t)
	want := []string{tickID("minutely", start.Add(time.Minute)), tickID("minutely", start.Add(12*time.Minute)),
		tickID("minutely", start.Add(13*time.Minute)), tickID("minutely", start.Add(14*time.Minute))}
	if !slices.Equal(got, want) {
		t.Errorf("jobs %v, want %v: RunAll from the resume at 03:15:30", got, want)
	}
}

// TestRunNowEnqueuesOnce: a run-now request is enqueued once by one of two
// schedulers, as a tick's job is built (type, payload, queue, options),
// with its own id, however often the request is sent again; the next
// tick runs as usual. Unknown, stale and badly named requests are
// refused and write nothing.
func TestRunNowEnqueuesOnce(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	sim := newSimulated(t, start)
	add := func(s *Scheduler) {
		mustAdd(t, s, "minutely", "* * * * *", JobOptions(job.MaxRetries(7), job.Header("team", "ops")))
	}
	a, b := sim.scheduler(t, Options{}, add), sim.scheduler(t, Options{}, add)
	sim.clk.Advance(20 * time.Second)
	ctx := sim.tb.Ctx

	r, err := runNow(ctx, sim.tb.B, "minutely", "req-1", sim.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "minutely@run:req-1" || r.State != RunPending || !r.Requested.Equal(sim.clk.Now()) {
		t.Fatalf("RunNow: %+v", r)
	}
	sim.clk.Advance(time.Second)
	again, err := runNow(ctx, sim.tb.B, "minutely", "req-1", sim.clk.Now()) // the reply was lost
	if err != nil || again != r {
		t.Fatalf("RunNow again: %+v, %v; want %+v", again, err, r)
	}
	sim.stepTogether(t, a, b)
	if got := sim.pending(t); !slices.Equal(got, []string{r.ID}) {
		t.Fatalf("after a step: jobs %v, want only %s", got, r.ID)
	}
	done, err := LookupRun(ctx, sim.tb.B, "minutely", "req-1")
	if err != nil || done.State != RunEnqueued || done.Queue != "reports" {
		t.Fatalf("LookupRun: %+v, %v; want enqueued in reports", done, err)
	}
	handled := map[string]int{}
	sim.drain(t, handled)
	// Sent again after it ran: the same request, nothing enqueued.
	if again, err := runNow(ctx, sim.tb.B, "minutely", "req-1", sim.clk.Now()); err != nil || again.State != RunEnqueued {
		t.Fatalf("RunNow after the run: %+v, %v", again, err)
	}
	sim.set(start.Add(time.Minute))
	sim.step(t, a, b)
	tick := tickID("minutely", start.Add(time.Minute))
	info, err := sim.tb.B.Job(ctx, "reports", tick)
	if err != nil {
		t.Fatalf("the next tick: %v", err)
	}
	sim.drain(t, handled)
	if !maps.Equal(handled, map[string]int{r.ID: 1, tick: 1}) {
		t.Errorf("handled %v, want the run and the tick once each", handled)
	}
	// A run-now of a fresh request: built as the tick's job.
	r2, err := runNow(ctx, sim.tb.B, "minutely", "", sim.clk.Now())
	if err != nil || !strings.HasPrefix(r2.ID, "minutely@run:") || len(r2.Request) != 16 {
		t.Fatalf("RunNow with no request id: %+v, %v", r2, err)
	}
	sim.step(t, b)
	run, err := sim.tb.B.Job(ctx, "reports", r2.ID)
	if err != nil {
		t.Fatal(err)
	}
	te, re := info.Envelope, run.Envelope
	if re.Type != te.Type || !bytes.Equal(re.Payload, te.Payload) || re.Queue != te.Queue || re.MaxRetries != 7 || re.MaxRetries != te.MaxRetries ||
		re.Headers["team"] != "ops" || re.Headers[headerRun] != r2.Request || re.Headers[headerSchedule] != "minutely" || re.Headers[headerSignature] == "" {
		t.Errorf("run-now job %+v\nwant built as the tick's %+v", re, te)
	}
	if st := sim.status(t, "minutely"); !st.Last.Equal(start.Add(time.Minute)) {
		t.Errorf("the last tick is %s after run-now requests, want the tick's %s", st.Last, start.Add(time.Minute))
	}

	// Refused, and nothing written.
	before, err := sim.tb.RDB.HLen(ctx, a.keys.Runs).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.tb.RDB.HSet(ctx, a.keys.Schedules, "gone", `{"spec":"@daily","expires":1}`).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, req string
		want      error
		text      string
	}{
		{"nosuch", "x", ErrUnknownSchedule, `cannot run "nosuch" now: periodic: no such schedule`},
		{"gone", "x", ErrNotRunning, `cannot run "gone" now: periodic: no running scheduler declares the schedule (stale since 1970-01-01T00:00:00Z)`},
		{"minutely", "a b", job.ErrInvalid, `run request id "a b" contains ' '`},
		{"minutely", strings.Repeat("r", maxRequestLen+1), job.ErrInvalid, "must be 1 to 64 bytes long"},
		{"bad name", "x", job.ErrInvalid, `schedule name "bad name"`},
	} {
		if _, err := runNow(ctx, sim.tb.B, tc.name, tc.req, sim.clk.Now()); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("RunNow(%q, %q): %v, want %v containing %q", tc.name, tc.req, err, tc.want, tc.text)
		}
	}
	if after, _ := sim.tb.RDB.HLen(ctx, a.keys.Runs).Result(); after != before {
		t.Errorf("refused requests wrote %d records", after-before)
	}
	if _, err := LookupRun(ctx, sim.tb.B, "minutely", "never"); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("LookupRun of a request never made: %v", err)
	}
	// Old requests go at a heartbeat.
	sim.clk.Advance(runRetention + time.Minute)
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := sim.tb.RDB.HLen(ctx, a.keys.Runs).Result(); n != 0 {
		t.Errorf("%d run-now requests kept after runRetention", n)
	}
}

// TestRunNowWhilePaused: a paused schedule runs a run-now request, and its
// ticks stay skipped.
func TestRunNowWhilePaused(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	sim := newSimulated(t, start)
	s := sim.scheduler(t, Options{}, func(s *Scheduler) { mustAdd(t, s, "minutely", "* * * * *") })
	if err := setPaused(sim.tb.Ctx, sim.tb.B, "minutely", true, sim.clk.Now()); err != nil {
		t.Fatal(err)
	}
	r, err := runNow(sim.tb.Ctx, sim.tb.B, "minutely", "now", sim.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	sim.clk.Advance(time.Minute)
	sim.step(t, s)
	if got := sim.pending(t); !slices.Equal(got, []string{r.ID}) {
		t.Errorf("jobs %v, want only the run-now job %s", got, r.ID)
	}
}

// set moves the simulated clock to at (not back).
func (sim *simulated) set(at time.Time) { sim.clk.Advance(at.Sub(sim.clk.Now())) }

// TestRunNowRecordsAnOutcome: the job of a run-now request records its
// outcome as the schedule's last, with the request's time as its tick; a
// copy of its headers on another job id records nothing.
func TestRunNowRecordsAnOutcome(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	sim := newSimulated(t, start)
	s := sim.scheduler(t, Options{}, func(s *Scheduler) { mustAdd(t, s, "nightly", "0 2 * * *") })
	sim.clk.Advance(1500 * time.Millisecond)
	r, err := runNow(sim.tb.Ctx, sim.tb.B, "nightly", "op", sim.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	sim.step(t, s)
	info, err := sim.tb.B.Job(sim.tb.Ctx, "reports", r.ID)
	if err != nil || info.Envelope == nil {
		t.Fatalf("the run-now job: %v", err)
	}
	handle := func(m *job.Message) {
		t.Helper()
		h := Outcomes(sim.tb.B)(job.HandlerFunc(func(context.Context, *job.Message) error { return errors.New("no data yet") }))
		_ = h.Handle(sim.tb.Ctx, m)
	}
	forged := &job.Message{Envelope: *info.Envelope, Attempt: 1}
	forged.ID = runID("nightly", "other")
	handle(forged)
	if st := sim.status(t, "nightly"); st.Outcome != nil {
		t.Fatalf("a forged run-now job recorded %+v", st.Outcome)
	}
	handle(&job.Message{Envelope: *info.Envelope, Attempt: 1})
	st := sim.status(t, "nightly")
	if st.Outcome == nil || st.Outcome.Result != ResultFailed || st.Outcome.Error != "no data yet" || !st.Outcome.Tick.Equal(start.Add(time.Second)) {
		t.Errorf("outcome %+v, want failed at the request's second %s", st.Outcome, start.Add(time.Second))
	}
}
