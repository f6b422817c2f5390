package cli_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// golden compares got with testdata/name.golden, or rewrites the file with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// T0 is the clock of the golden runs: every command gets --now T0, and the
// jobs are written with a simulated clock around it.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func rfc(t time.Time) string { return t.Format(time.RFC3339Nano) }

func TestGoldenTables(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	clk := clock.NewSimulated(t0.Add(-time.Hour))
	b, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)

	// Scheduled jobs, through the tool itself.
	tb.ok(t, "enqueue", "--now", rfc(t0), "--queue", "mail", "--type", "email.send", "--id", "welcome-1",
		"--payload", `{"to":"ann@example.com","template":"welcome"}`, "--at", rfc(t0.Add(90*time.Second)))
	tb.ok(t, "enqueue", "--now", rfc(t0.Add(-10*time.Second)), "--queue", "mail", "--type", "email.send", "--id", "receipt-7",
		"--payload", `{"to":"bob@example.com","order":7}`, "--in", "6s", "--max-retries", "3")
	tb.ok(t, "enqueue", "--now", rfc(t0), "--queue", "sms", "--type", "sms.send", "--id", "remind-2",
		"--payload", `{"to":"+15550100"}`, "--in", "1h")

	// Dead jobs: one an hour ago in sms, two in mail.
	kill := func(queue, id, typ, errText string, diedAt time.Time) {
		t.Helper()
		clk.Advance(diedAt.Sub(clk.Now()))
		e := &job.Envelope{ID: id, Queue: queue, Type: typ, Payload: []byte(`{"id":"` + id + `"}`), MaxRetries: 2, CreatedAt: diedAt.Add(-time.Hour)}
		if err := b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
		res, err := testkit.Drive(b).Claim(tb.ctx, queue, 1, time.Minute)
		if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != id {
			t.Fatalf("claim %s: %+v, %v", id, res.Jobs, err)
		}
		c := res.Jobs[0]
		if _, err := testkit.Drive(b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Type: typ, Body: c.Body, Error: errText, Attempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	kill("sms", "sms-9", "sms.send", "twilio: 429 too many requests", t0.Add(-time.Hour))
	kill("mail", "bounce-1", "email.send", "smtp: 550 mailbox unavailable", t0.Add(-2*time.Minute))
	kill("mail", "panic-2", "email.render", "panic: runtime error: index out of range [3] with length 3\n\ngoroutine 42 [running]:\nmain.render(...)\n\t/app/render.go:17 +0x1d", t0.Add(-30*time.Second))

	// A processing job, claimed 10s before T0 with a 30s lease.
	clk.Advance(t0.Add(-10 * time.Second).Sub(clk.Now()))
	e := &job.Envelope{ID: "digest-3", Queue: "mail", Type: "email.digest", Payload: []byte(`{"week":1}`), MaxRetries: 5,
		CreatedAt: t0.Add(-time.Minute), Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	if err := b.Enqueue(tb.ctx, e); err != nil {
		t.Fatal(err)
	}
	if res, err := testkit.Drive(b).Claim(tb.ctx, "mail", 1, 30*time.Second); err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != "digest-3" {
		t.Fatalf("claim digest-3: %+v, %v", res, err)
	}

	// Fair turns between keys on in sms: queues ls says so in its STATE.
	if err := b.SetKeyFairness(tb.ctx, "sms", true); err != nil {
		t.Fatal(err)
	}

	now := "--now=" + rfc(t0)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stats", []string{"stats"}},
		{"queues_ls", []string{"queues", "ls"}},
		{"jobs_ls", []string{"jobs", "ls", "--queue", "mail"}},
		{"jobs_ls_paged", []string{"jobs", "ls", "--queue", "mail", "--limit", "2"}},
		{"jobs_show_processing", []string{"jobs", "show", "digest-3", "--queue", "mail"}},
		{"jobs_show_scheduled", []string{"jobs", "show", "receipt-7", "--queue", "mail"}},
		{"dead_ls", []string{"dead", "ls"}},
		{"dead_ls_filtered", []string{"dead", "ls", "--type", "email.send", "--since", "10m"}},
		{"dead_show", []string{"dead", "show", "panic-2", "--queue", "mail"}},
	} {
		r := tb.run(t, append(tc.args, now)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("delayq %s: exit %d, stderr %q", strings.Join(tc.args, " "), r.code, r.stderr)
		}
		golden(t, tc.name, r.stdout)
	}

	// Errors are one line on stderr.
	r := tb.run(t, "jobs", "reschedule", "welcome-1", "--queue", "mail", "--in", "soon", now)
	golden(t, "usage_error", r.stderr)
	// Cancelling the processing job tells its worker; the line says so.
	golden(t, "cancel_running", tb.ok(t, "jobs", "cancel", "digest-3", "receipt-7", "--queue", "mail", now))
}
