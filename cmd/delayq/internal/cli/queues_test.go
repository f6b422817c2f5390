package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestQueuesPauseResume: delayq queues pause stops the claims of a queue
// (or of one job type: its due jobs are parked), queues ls and stats show
// it, and resume lets the jobs be claimed again.
func TestQueuesPauseResume(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, e := range []*job.Envelope{
		{ID: "a1", Queue: "mail", Type: "email.send", Payload: []byte(`{}`)},
		{ID: "b1", Queue: "mail", Type: "email.digest", Payload: []byte(`{}`)},
	} {
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() []string {
		t.Helper()
		res, err := testkit.Drive(tb.b).Claim(tb.ctx, "mail", 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range res.Jobs {
			ids = append(ids, c.ID)
		}
		return ids
	}

	if out := tb.ok(t, "queues", "pause", "mail"); out != "paused queue mail\n" {
		t.Errorf("pause: %q", out)
	}
	if ids := claim(); len(ids) != 0 {
		t.Fatalf("claimed %v from a paused queue", ids)
	}
	out := tb.ok(t, "queues", "ls")
	if !strings.Contains(out, "QUEUE  STATE   PAUSED TYPES  PARKED  SCHEDULED  DUE  PROCESSING") || !strings.Contains(out, "mail   paused  -             0       2          2    0") {
		t.Errorf("queues ls while paused:\n%s", out)
	}
	if out := tb.ok(t, "stats"); !strings.Contains(out, "mail (paused)") {
		t.Errorf("stats does not say the queue is paused:\n%s", out)
	}
	var st struct {
		Queues []struct {
			Queue  string `json:"queue"`
			Paused bool   `json:"paused"`
		} `json:"queues"`
	}
	tb.okJSON(t, &st, "stats")
	if len(st.Queues) != 1 || !st.Queues[0].Paused {
		t.Errorf("stats --json while paused: %+v", st.Queues)
	}
	if out := tb.ok(t, "queues", "resume", "mail"); out != "resumed queue mail\n" {
		t.Errorf("resume: %q", out)
	}

	// One type paused: its due job is parked at the claim, the other claimed.
	if out := tb.ok(t, "queues", "pause", "mail", "--type", "email.send"); out != "paused job type email.send in queue mail\n" {
		t.Errorf("pause --type: %q", out)
	}
	if ids := claim(); len(ids) != 1 || ids[0] != "b1" {
		t.Fatalf("claimed %v with email.send paused, want [b1]", ids)
	}
	var ls struct {
		Queues []struct {
			Queue       string   `json:"queue"`
			Paused      bool     `json:"paused"`
			PausedTypes []string `json:"paused_types"`
			Parked      int64    `json:"parked"`
		} `json:"queues"`
	}
	tb.okJSON(t, &ls, "queues", "ls")
	if len(ls.Queues) != 1 || ls.Queues[0].Paused || len(ls.Queues[0].PausedTypes) != 1 || ls.Queues[0].PausedTypes[0] != "email.send" || ls.Queues[0].Parked != 1 {
		t.Errorf("queues ls --json with a type paused: %+v", ls.Queues)
	}
	if out := tb.ok(t, "stats"); !strings.Contains(out, "mail (types paused)") {
		t.Errorf("stats does not say a type is paused:\n%s", out)
	}
	if out := tb.ok(t, "queues", "resume", "mail", "--type", "email.send"); out != "resumed job type email.send in queue mail: 1 parked jobs back on the schedule\n" {
		t.Errorf("resume --type: %q", out)
	}
	if ids := claim(); len(ids) != 1 || ids[0] != "a1" {
		t.Fatalf("claimed %v after the resume, want [a1]", ids)
	}

	for _, args := range [][]string{{"queues", "pause"}, {"queues", "pause", "no spaces"}, {"queues", "resume", "mail", "--type", "bad type"}, {"queues"}} {
		if r := tb.run(t, args...); r.code != 2 {
			t.Errorf("delayq %v: exit %d (%q), want 2", args, r.code, r.stderr)
		}
	}
}
