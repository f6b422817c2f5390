package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/fixture"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/tickid"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
)

type digestArgs struct {
	Week int `json:"week"`
}

var (
	digestType  = job.New[digestArgs]("email.digest", job.Queue("mail"))
	cleanupType = job.New[digestArgs]("files.cleanup", job.Queue("maintenance"))
)

// seedPeriodic stores three schedules as of t0: one left behind by an old
// deploy (stale), one that ticked at 03:03:00 (its scheduler started
// 0.3 s before) and failed, one that never ran (RunOnce, in Berlin).
func seedPeriodic(t *testing.T, tb *testBundle) {
	t.Helper()
	fixture.RunScheduler(t, tb.b, t0.Add(-5*time.Minute-30*time.Second), func(s *periodic.Scheduler) error {
		return periodic.Add(s, "old-cleanup", "0 4 * * 0", cleanupType, digestArgs{})
	}, func(l []periodic.Status) bool { return fixture.Find(l, "old-cleanup") != nil })
	fixture.RunScheduler(t, tb.b, time.Date(2030, 1, 2, 3, 2, 59, 700_000_000, time.UTC), func(s *periodic.Scheduler) error {
		if err := periodic.Add(s, "hourly-digest", "3 * * * *", digestType, digestArgs{Week: 1}); err != nil {
			return err
		}
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			return err
		}
		return periodic.Add(s, "nightly-report", "30 2 * * *", digestType, digestArgs{Week: 2},
			periodic.Location(berlin), periodic.RunMissedOnce(6*time.Hour))
	}, func(l []periodic.Status) bool {
		st := fixture.Find(l, "hourly-digest")
		return st != nil && !st.Last.IsZero()
	})
	// The tick's job failed, outside a worker: "failed" with its error.
	tick := time.Date(2030, 1, 2, 3, 3, 0, 0, time.UTC)
	m := fixture.TickMessage(t, tb.b, "mail", tickid.ID("hourly-digest", tick), 1, t0.Add(-40*time.Second))
	h := periodic.Outcomes(tb.b)(job.HandlerFunc(func(context.Context, *job.Message) error {
		return errors.New("smtp: 550 mailbox unavailable")
	}))
	if err := h.Handle(tb.ctx, m); err == nil {
		t.Fatal("the failing handler succeeded")
	}
}

func TestGoldenPeriodic(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := tb.run(t, "periodic", "ls", "--now", rfc(t0))
	if r.code != 0 || r.stdout != "no periodic schedules in namespace "+tb.ns+"\n" {
		t.Fatalf("periodic ls on an empty namespace: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	seedPeriodic(t, tb)
	golden(t, "periodic_ls", tb.ok(t, "periodic", "ls", "--now", rfc(t0)))

	var out struct {
		Schedules []struct {
			Name    string `json:"name"`
			Next    string `json:"next_run"`
			Last    string `json:"last_run"`
			LastID  string `json:"last_job_id"`
			Stale   bool   `json:"stale"`
			Missed  string `json:"missed"`
			Within  int64  `json:"missed_within_ms"`
			Outcome *struct {
				Result string `json:"result"`
				Error  string `json:"error"`
			} `json:"last_outcome"`
		} `json:"schedules"`
	}
	tb.okJSON(t, &out, "periodic", "ls", "--now", rfc(t0))
	got, _ := json.Marshal(out)
	want := `{"schedules":[` +
		`{"name":"hourly-digest","next_run":"2030-01-02T04:03:00Z","last_run":"2030-01-02T03:03:00Z","last_job_id":"hourly-digest@2030-01-02T03:03:00Z","stale":false,"missed":"once","missed_within_ms":3600000,"last_outcome":{"result":"failed","error":"smtp: 550 mailbox unavailable"}},` +
		`{"name":"nightly-report","next_run":"2030-01-03T01:30:00Z","last_run":"","last_job_id":"","stale":false,"missed":"once","missed_within_ms":21600000,"last_outcome":null},` +
		`{"name":"old-cleanup","next_run":"","last_run":"","last_job_id":"","stale":true,"missed":"once","missed_within_ms":3600000,"last_outcome":null}]}`
	if string(got) != want {
		t.Errorf("periodic ls --json:\n got %s\nwant %s", got, want)
	}
	// A subcommand is needed; an unknown one is bad usage.
	if r := tb.run(t, "periodic"); r.code != 2 || !strings.Contains(r.stderr, "needs a subcommand: ls") {
		t.Errorf("delayq periodic: exit %d, stderr %q; want 2 naming ls", r.code, r.stderr)
	}
	if r := tb.run(t, "periodic", "rm"); r.code != 2 || !strings.Contains(r.stderr, `unknown command "rm"`) {
		t.Errorf("delayq periodic rm: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
}

// TestPeriodicLsUnreadableRecord: a schedule record that does not decode
// (garbage written into Redis) leaves `periodic ls` answering, table and
// --json, with every other schedule as usual and a row that names the bad
// record and says why; the exit code is 0.
func TestPeriodicLsUnreadableRecord(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	seedPeriodic(t, tb)
	if err := tb.rdb.HSet(tb.ctx, keyspace.Periodic(tb.ns).Schedules, "broken", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	out := tb.ok(t, "periodic", "ls", "--now", rfc(t0))
	var broken string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "broken ") {
			broken = line
		}
	}
	if !strings.Contains(broken, `unreadable: stored schedule record does not decode: `) || !strings.Contains(broken, `"{not json"`) {
		t.Errorf("periodic ls: the bad record's row is %q; want its name and why it is unreadable:\n%s", broken, out)
	}
	for _, name := range []string{"hourly-digest ", "nightly-report ", "old-cleanup "} {
		if !strings.Contains(out, "\n"+name) {
			t.Errorf("periodic ls lacks %s:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "failed 40s ago: smtp: 550 mailbox unavailable") {
		t.Errorf("periodic ls lost hourly-digest's outcome:\n%s", out)
	}

	var got struct {
		Schedules []struct {
			Name    string `json:"name"`
			Spec    string `json:"spec"`
			Problem string `json:"problem"`
		} `json:"schedules"`
	}
	tb.okJSON(t, &got, "periodic", "ls", "--now", rfc(t0))
	var names []string
	for _, s := range got.Schedules {
		names = append(names, s.Name)
		switch {
		case s.Name == "broken":
			if s.Spec != "" || !strings.HasPrefix(s.Problem, "stored schedule record does not decode: ") {
				t.Errorf("--json: broken: %+v; want a problem naming the schedule record", s)
			}
		case s.Problem != "" || s.Spec == "":
			t.Errorf("--json: %+v; want it whole, without a problem", s)
		}
	}
	if strings.Join(names, ",") != "broken,hourly-digest,nightly-report,old-cleanup" {
		t.Errorf("--json lists %v", names)
	}
}

// TestPeriodicLsShowsRefusedTicks: a schedule whose job expired (its
// ticks cannot be enqueued any more) shows in `periodic ls`, table and
// --json, with the last outcome "refused" and why.
func TestPeriodicLsShowsRefusedTicks(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	// The scheduler's clock is an hour ahead: its first tick is after the
	// expiry, which Add (on the real clock) still accepts.
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	fixture.RunScheduler(t, tb.b, at, func(s *periodic.Scheduler) error {
		return periodic.Add(s, "promo", "@every 1s", digestType, digestArgs{Week: 3},
			periodic.JobOptions(job.ExpireAt(time.Now().Add(time.Minute))))
	}, func(l []periodic.Status) bool {
		st := fixture.Find(l, "promo")
		return st != nil && st.Outcome != nil
	})
	now := rfc(at.Add(10 * time.Second))
	out := tb.ok(t, "periodic", "ls", "--now", now)
	if !regexp.MustCompile(`refused \d+s ago: job: invalid: expiry `).MatchString(out) {
		t.Errorf("periodic ls does not show the refused tick and why:\n%s", out)
	}
	var got struct {
		Schedules []struct {
			Name    string `json:"name"`
			LastID  string `json:"last_job_id"`
			Outcome *struct {
				Result string `json:"result"`
				Error  string `json:"error"`
			} `json:"last_outcome"`
		} `json:"schedules"`
	}
	tb.okJSON(t, &got, "periodic", "ls", "--now", now)
	if len(got.Schedules) != 1 || got.Schedules[0].Outcome == nil || got.Schedules[0].Outcome.Result != "refused" ||
		!strings.Contains(got.Schedules[0].Outcome.Error, "is not after the ready time") || got.Schedules[0].LastID != "" {
		t.Errorf("periodic ls --json: %+v; want promo refused, saying why, and no last run", got.Schedules)
	}
}
