package periodic_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/internal/tickid"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// TestBadDeclarations: every bad declaration fails at Add with an error
// that wraps job.ErrInvalid and names the schedule and what is wrong, and
// a scheduler whose every Add failed writes nothing.
func TestBadDeclarations(t *testing.T) {
	t.Parallel()
	tb := testkit.Setup(t)
	if _, err := periodic.New(tb.B, periodic.Options{Enqueue: []job.EnqueueMiddleware{nil}}); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "Options.Enqueue[0] is nil") {
		t.Errorf("nil enqueue middleware: %v", err)
	}
	s, err := periodic.New(tb.B, periodic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := periodic.Add(s, "ok", "@hourly", pingType, Ping{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, spec string
		opts       []periodic.Option
		want       string
	}{
		{"nightly", "30 2 * *", nil, `schedule "nightly": cron expression "30 2 * *"`},
		{"nightly", "@every 100ms", nil, "@every needs a whole number of seconds"},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.Location(nil)}, "nil *time.Location"},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.RunMissedOnce(0)}, "RunMissedOnce window 0s is not positive"},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.JobOptions(job.ID("x"))}, "ID, In and At are set by the scheduler"},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.JobOptions(job.In(time.Second))}, "ID, In and At are set by the scheduler"},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.JobOptions(job.MaxRetries(-1))}, "max retries -1 is negative"},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.JobOptions(job.Queue("no spaces"))}, "queue name"},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.JobOptions(job.ExpireAt(time.Now().Add(-time.Minute)))}, `schedule "nightly": job: invalid: expiry`},
		{"nightly", "30 2 * * *", []periodic.Option{periodic.JobOptions(job.Replace())}, "job option Replace would let a second scheduler replace"},
		{"nightly", "0 0 30 2 *", nil, `cron expression "0 0 30 2 *" has no tick after`},
		{"ok", "@daily", nil, `schedule "ok": a schedule with that name was added already`},
		{"", "@daily", nil, `schedule name ""`},
		{"bad name", "@daily", nil, `schedule name "bad name" contains ' '`},
		{strings.Repeat("n", 129), "@daily", nil, "must be 1 to 128 bytes long"},
	} {
		err := periodic.Add(s, tc.name, tc.spec, pingType, Ping{}, tc.opts...)
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%q, %q): %v, want an error wrapping job.ErrInvalid containing %q", tc.name, tc.spec, err, tc.want)
		}
	}
	if err := periodic.Add[Ping](s, "nil-type", "@daily", nil, Ping{}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("Add with a nil type: %v", err)
	}
	if n, err := tb.RDB.Exists(tb.Ctx, keyspace.Periodic(tb.NS).Schedules, keyspace.Periodic(tb.NS).Last).Result(); err != nil || n != 0 {
		t.Errorf("declarations wrote %d keys (%v); want none before Run", n, err)
	}
	for _, cfg := range []periodic.Options{{Tolerance: -1}, {Poll: -time.Second}, {Heartbeat: time.Minute, StaleAfter: time.Minute}} {
		if _, err := periodic.New(tb.B, cfg); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("New(%+v): %v, want job.ErrInvalid", cfg, err)
		}
	}
}

// TestRunRecordsOutcomes: Run syncs the schedules, its ticks reach the
// worker, and Outcomes records the latest attempt's end: success, or dead
// with the error.
func TestRunRecordsOutcomes(t *testing.T) {
	t.Parallel()
	tb := testkit.Setup(t)
	failing := job.New[Ping]("health.fail", job.Queue("health"), job.MaxRetries(0))
	pingType.Handle(tb.Reg, func(context.Context, *job.Job[Ping]) error { return nil })
	failing.Handle(tb.Reg, func(context.Context, *job.Job[Ping]) error { return retry.Permanent(errors.New("upstream said no")) })
	cfg := tb.Config(t)
	cfg.Queues = []worker.Queue{{Name: "health"}}
	testkit.StartWorker(t, cfg, periodic.Outcomes(tb.B))

	s, err := periodic.New(tb.B, periodic.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := periodic.Add(s, "ok", "@every 1s", pingType, Ping{Service: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := periodic.Add(s, "bad", "* * * * * *", failing, Ping{Service: "b"}, periodic.RunMissedOnce(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	var list []periodic.Status
	ok := waitFor(t, 30*time.Second, func() bool {
		list, err = periodic.List(tb.Ctx, tb.B, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list) == 2 && list[0].Outcome != nil && list[1].Outcome != nil
	})
	if !ok {
		t.Fatalf("no outcomes recorded within 30s: %+v", list)
	}
	bad, good := list[0], list[1]
	if bad.Name != "bad" || bad.Outcome.Result != "dead" || bad.Outcome.Error != "upstream said no" || bad.Missed != "once" || bad.Within != time.Hour {
		t.Errorf("bad: %+v, outcome %+v", bad, bad.Outcome)
	}
	if good.Name != "ok" || good.Outcome.Result != "success" || good.Spec != "@every 1s" || good.Zone != "UTC" || good.Type != "health.ping" || good.Queue != "health" || good.Stale {
		t.Errorf("ok: %+v, outcome %+v", good, good.Outcome)
	}
	for _, st := range list {
		if st.Last.IsZero() || st.LastID != tickid.ID(st.Name, st.Last) || !st.Next.After(st.Last) || st.Outcome.Tick.IsZero() || st.Outcome.Attempt != 1 {
			t.Errorf("%s: last %s (%s), next %s, outcome %+v", st.Name, st.Last, st.LastID, st.Next, st.Outcome)
		}
	}
	if err := periodic.Add(s, "late", "@daily", pingType, Ping{}); !errors.Is(err, periodic.ErrStarted) {
		t.Errorf("Add while running: %v, want ErrStarted", err)
	}
	if err := s.Run(ctx); !errors.Is(err, periodic.ErrStarted) {
		t.Errorf("second Run: %v, want ErrStarted", err)
	}
}

// waitFor polls cond until it holds or d passed.
func waitFor(t *testing.T, d time.Duration, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestListShowsTheRestBesideAnUnreadableRecord: a schedule record and an
// outcome that do not decode (garbage written into Redis) do not fail
// List: the other schedules are listed as usual, and each bad record's
// schedule is listed with its name and a Problem that says which record
// and why.
func TestListShowsTheRestBesideAnUnreadableRecord(t *testing.T) {
	t.Parallel()
	tb := testkit.Setup(t)
	keys := keyspace.Periodic(tb.NS)
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	good := `{"spec":"@hourly","zone":"UTC","type":"health.ping","queue":"health","missed":"once","within_ms":3600000,"seen":` +
		itoa(now.UnixMilli()) + `,"expires":` + itoa(now.Add(time.Minute).UnixMilli()) + `}`
	if err := tb.RDB.HSet(tb.Ctx, keys.Schedules, "good", good, "broken", "{not json", "bad-outcome", good).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.RDB.HSet(tb.Ctx, keys.Outcomes, "bad-outcome", "\x00\x01", "good", `{"result":"success","tick":1,"at":2,"attempt":1}`).Err(); err != nil {
		t.Fatal(err)
	}
	list, err := periodic.List(tb.Ctx, tb.B, now)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 3 {
		t.Fatalf("List: %d schedules, want 3: %+v", len(list), list)
	}
	badOutcome, broken, ok := list[0], list[1], list[2]
	if broken.Name != "broken" || !strings.HasPrefix(broken.Problem, "stored schedule record does not decode: ") ||
		!strings.Contains(broken.Problem, `"{not json"`) || broken.Spec != "" || broken.Stale {
		t.Errorf("broken: %+v; want its name and a Problem naming the schedule record", broken)
	}
	if badOutcome.Name != "bad-outcome" || badOutcome.Spec != "@hourly" || badOutcome.Outcome != nil ||
		!strings.HasPrefix(badOutcome.Problem, "stored outcome does not decode: ") {
		t.Errorf("bad-outcome: %+v; want the schedule, no outcome, a Problem naming the outcome", badOutcome)
	}
	if ok.Name != "good" || ok.Problem != "" || ok.Spec != "@hourly" || ok.Missed != "once" || ok.Within != time.Hour ||
		ok.Outcome == nil || ok.Outcome.Result != "success" || !ok.Next.Equal(time.Date(2030, 1, 2, 4, 0, 0, 0, time.UTC)) {
		t.Errorf("good: %+v, outcome %+v; want it whole", ok, ok.Outcome)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestForgedJobDoesNotChangeTheOutcome: while a scheduler and a worker
// with Outcomes run an every-second schedule, jobs that carry its headers
// (a tick of next year's, one with a made-up signature, one of a name that
// is no schedule) fail for good in the same worker. None becomes the
// schedule's last outcome, though it would stay (a later tick's outcome is
// never replaced): the outcomes that follow are the real ticks'
// successes, and no outcome of the made-up name is stored.
func TestForgedJobDoesNotChangeTheOutcome(t *testing.T) {
	t.Parallel()
	tb := testkit.Setup(t)
	forger := job.New[Ping]("health.forged", job.Queue("health"), job.MaxRetries(0))
	pingType.Handle(tb.Reg, func(context.Context, *job.Job[Ping]) error { return nil })
	forger.Handle(tb.Reg, func(context.Context, *job.Job[Ping]) error { return errors.New("forged: it never ran") })
	cfg := tb.Config(t)
	cfg.Queues = []worker.Queue{{Name: "health"}}
	testkit.StartWorker(t, cfg, periodic.Outcomes(tb.B))
	s, err := periodic.New(tb.B, periodic.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := periodic.Add(s, "nightly", "@every 1s", pingType, Ping{Service: "a"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	outcome := func() *periodic.LastOutcome {
		t.Helper()
		list, err := periodic.List(tb.Ctx, tb.B, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range list {
			if st.Name == "nightly" {
				return st.Outcome
			}
		}
		return nil
	}
	if !waitFor(t, 30*time.Second, func() bool { o := outcome(); return o != nil && o.Result == periodic.ResultSuccess }) {
		t.Fatalf("no success recorded within 30s: %+v", outcome())
	}

	next := time.Now().UTC().AddDate(1, 0, 0).Truncate(time.Second)
	tick := next.Format("2006-01-02T15:04:05Z")
	for id, h := range map[string]map[string]string{
		tickid.ID("nightly", next):                {"delayq-periodic": "nightly", "delayq-periodic-tick": tick},
		tickid.ID("nightly", next.Add(time.Hour)): {"delayq-periodic": "nightly", "delayq-periodic-tick": next.Add(time.Hour).Format("2006-01-02T15:04:05Z"), "delayq-periodic-sig": "AAAAAAAAAAAAAAAAAAAAAA"},
		tickid.ID("ghost", next):                  {"delayq-periodic": "ghost", "delayq-periodic-tick": tick},
	} {
		opts := []job.Option{job.ID(id)}
		for k, v := range h {
			opts = append(opts, job.Header(k, v))
		}
		if _, err := forger.Enqueue(tb.Ctx, tb.B, Ping{}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(t, 30*time.Second, func() bool {
		st, err := testkit.OneStats(tb.B.Stats(tb.Ctx, "health"))
		return err == nil && st.Dead == 3
	}) {
		t.Fatal("the forged jobs did not fail within 30s")
	}
	died := time.Now()
	// Had a forged job been recorded, its tick (next year) would hold.
	if !waitFor(t, 30*time.Second, func() bool {
		o := outcome()
		return o != nil && o.Result == periodic.ResultSuccess && o.Tick.After(died.Add(time.Second))
	}) {
		t.Fatalf("outcome after the forged jobs died: %+v; want the real ticks' successes", outcome())
	}
	if names, err := tb.RDB.HKeys(tb.Ctx, keyspace.Periodic(tb.NS).Outcomes).Result(); err != nil || len(names) != 1 || names[0] != "nightly" {
		t.Errorf("outcomes stored for %v (%v), want nightly's alone", names, err)
	}
}
