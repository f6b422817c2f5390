package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/periodic"
)

// TestPeriodicPauseResume: `periodic pause` and `resume` change the
// stored pause (table and --json output), `periodic ls` shows it, and an
// unknown or bad name, or no name, is bad input (exit 2) that changes
// nothing.
func TestPeriodicPauseResume(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	seedPeriodic(t, tb)
	if out := tb.ok(t, "periodic", "pause", "hourly-digest"); out != "paused schedule hourly-digest\n" {
		t.Errorf("periodic pause: %q", out)
	}
	out := tb.ok(t, "periodic", "ls", "--now", rfc(t0))
	if line := lineOf(out, "hourly-digest "); !strings.Contains(line, "paused (") {
		t.Errorf("periodic ls after the pause: %q, want it paused\n%s", line, out)
	}
	var ls struct {
		Schedules []struct {
			Name     string  `json:"name"`
			Paused   bool    `json:"paused"`
			PausedAt *string `json:"paused_at"`
		} `json:"schedules"`
	}
	tb.okJSON(t, &ls, "periodic", "ls", "--now", rfc(t0))
	for _, s := range ls.Schedules {
		if (s.Name == "hourly-digest") != s.Paused || s.Paused != (s.PausedAt != nil) {
			t.Errorf("periodic ls --json: %s paused %v at %v", s.Name, s.Paused, s.PausedAt)
		}
	}
	var res struct {
		Schedule string `json:"schedule"`
		Paused   bool   `json:"paused"`
	}
	tb.okJSON(t, &res, "periodic", "resume", "hourly-digest")
	if res.Schedule != "hourly-digest" || res.Paused {
		t.Errorf("periodic resume --json: %+v", res)
	}
	if st := findStatus(t, tb, "hourly-digest"); st.Paused || st.ResumedAt.IsZero() {
		t.Errorf("after resume: %+v", st)
	}
	if out := tb.ok(t, "periodic", "resume", "hourly-digest"); out != "resumed schedule hourly-digest\n" {
		t.Errorf("periodic resume of a resumed schedule: %q", out)
	}

	before := tb.rdb.HGetAll(tb.ctx, keyspace.Periodic(tb.ns).Paused).Val()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"periodic", "pause", "hourly-digets"}, `cannot pause "hourly-digets": periodic: no such schedule`},
		{[]string{"periodic", "resume", "nope"}, `cannot resume "nope": periodic: no such schedule`},
		{[]string{"periodic", "pause", "bad name"}, `schedule name "bad name" contains ' '`},
		{[]string{"periodic", "pause"}, "expected one schedule name, got 0 argument(s)"},
		{[]string{"periodic", "resume", "a", "b"}, "expected one schedule name, got 2 argument(s)"},
	} {
		r := tb.run(t, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("delayq %q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	if after := tb.rdb.HGetAll(tb.ctx, keyspace.Periodic(tb.ns).Paused).Val(); len(after) != len(before) {
		t.Errorf("refused commands changed the pauses: %v -> %v", before, after)
	}
}

// TestPeriodicRun: `periodic run` with a scheduler running enqueues the
// schedule's job once and prints its id and queue, also when sent again
// with the same --request (table and --json); without a running scheduler
// it records the request (--wait 0) or fails once --wait passed (exit 1);
// an unknown name or bad request id is bad input (exit 2), a stale
// schedule a failure (exit 1).
func TestPeriodicRun(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	seedPeriodic(t, tb) // hourly-digest: its scheduler stopped, its record is not stale yet
	s, err := periodic.New(tb.b, periodic.Options{Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := periodic.Add(s, "weekly-digest", "0 6 * * 1", digestType, digestArgs{Week: 9}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); findStatusOK(t, tb, "weekly-digest") == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the scheduler did not sync its schedule within 30s")
		}
	}

	for range 2 { // the second time: a resend
		if out := tb.ok(t, "periodic", "run", "weekly-digest", "--request", "op-1"); out != "enqueued weekly-digest@run:op-1 in queue mail\n" {
			t.Errorf("periodic run: %q", out)
		}
	}
	var res struct {
		Schedule string `json:"schedule"`
		Request  string `json:"request"`
		JobID    string `json:"job_id"`
		State    string `json:"state"`
		Queue    string `json:"queue"`
	}
	tb.okJSON(t, &res, "periodic", "run", "weekly-digest", "--request", "op-1")
	if res != (struct {
		Schedule string `json:"schedule"`
		Request  string `json:"request"`
		JobID    string `json:"job_id"`
		State    string `json:"state"`
		Queue    string `json:"queue"`
	}{"weekly-digest", "op-1", "weekly-digest@run:op-1", "enqueued", "mail"}) {
		t.Errorf("periodic run --json: %+v", res)
	}
	info, err := tb.b.Job(tb.ctx, "mail", "weekly-digest@run:op-1")
	if err != nil || info.Envelope.Type != "email.digest" || string(info.Envelope.Payload) != `{"week":9}` {
		t.Fatalf("the run-now job: %+v, %v", info, err)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "mail")); err != nil || st.Scheduled != 2 {
		// hourly-digest's tick from the seed, and the one run-now job.
		t.Errorf("jobs in mail: %+v, %v; want the seeded tick and one run", st, err)
	}

	// No running scheduler declares hourly-digest.
	if out := tb.ok(t, "periodic", "run", "hourly-digest", "--request", "r2", "--wait", "0"); out != "requested hourly-digest@run:r2: a scheduler enqueues it at its next step\n" {
		t.Errorf("periodic run --wait 0: %q", out)
	}
	r := tb.run(t, "periodic", "run", "hourly-digest", "--request", "r2", "--wait", "300ms")
	if r.code != 1 || !strings.Contains(r.stderr, "run-now request hourly-digest@run:r2 is recorded, but no scheduler enqueued its job within 300ms") {
		t.Errorf("periodic run with no scheduler: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := tb.rdb.HSet(tb.ctx, keyspace.Periodic(tb.ns).Schedules, "gone", `{"spec":"@daily","expires":1}`).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"periodic", "run", "nosuch"}, 2, `cannot run "nosuch" now: periodic: no such schedule`},
		{[]string{"periodic", "run", "weekly-digest", "--request", "a/b"}, 2, `run request id "a/b" contains '/'`},
		{[]string{"periodic", "run", "weekly-digest", "--wait", "-1s"}, 2, "invalid --wait -1s"},
		{[]string{"periodic", "run"}, 2, "expected one schedule name"},
		{[]string{"periodic", "run", "gone"}, 1, "no running scheduler declares the schedule"},
	} {
		r := tb.run(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("delayq %q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

func lineOf(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

func findStatusOK(t *testing.T, tb *testBundle, name string) *periodic.Status {
	t.Helper()
	all, err := periodic.List(tb.ctx, tb.b, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i]
		}
	}
	return nil
}

func findStatus(t *testing.T, tb *testBundle, name string) periodic.Status {
	t.Helper()
	st := findStatusOK(t, tb, name)
	if st == nil {
		t.Fatalf("no schedule %q", name)
	}
	return *st
}
