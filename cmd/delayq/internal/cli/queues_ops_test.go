package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestQueuesTypoRefused: pausing, resuming, capping or limiting a queue
// nothing was ever enqueued to is refused (exit 1, the error says why and
// names --create) and stores nothing: the name does not appear in stats or
// queues ls. With --create it acts.
func TestQueuesTypoRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "a", Queue: "sms", Type: "sms.send", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"queues", "pause", "smss"},
		{"queues", "resume", "smss"},
		{"queues", "pause", "smss", "--type", "sms.send"},
		{"queues", "cap", "smss", "3"},
		{"queues", "limit", "smss", "10/1s"},
		{"queues", "limit", "smss", "--clear"},
	} {
		r := tb.run(t, args...)
		if r.code != 1 || !strings.Contains(r.stderr, `queue "smss" was never used in namespace`) || !strings.Contains(r.stderr, "--create") {
			t.Errorf("delayq %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if names := tb.rdb.SMembers(tb.ctx, keyspace.QueuesKey(tb.ns)).Val(); len(names) != 1 || names[0] != "sms" {
		t.Fatalf("known queues after the refused typos: %v", names)
	}
	if n, _ := tb.rdb.Keys(tb.ctx, tb.ns+":{smss}*").Result(); len(n) != 0 {
		t.Fatalf("keys of the typo stored: %v", n)
	}
	if out := tb.ok(t, "queues", "pause", "sms"); out != "paused queue sms\n" {
		t.Errorf("pause of a known queue: %q", out)
	}
	if out := tb.ok(t, "queues", "pause", "new", "--create"); out != "paused queue new\n" {
		t.Errorf("pause --create: %q", out)
	}
	if ok, _ := protocol.Admin(tb.b).Known(tb.ctx, "new"); !ok {
		t.Error("pause --create did not make the queue known")
	}
}

// TestQueuesForget: forget refuses a queue with jobs or dead records,
// naming what is left, and changes nothing; it removes an empty queue with
// its controls, so stats and queues ls no longer list it; it refuses an
// unknown name.
func TestQueuesForget(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "a", Queue: "mail", Type: "mail.send", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	tb.killMany(t, "dl", 2, "x")
	r := tb.run(t, "queues", "forget", "mail")
	if r.code != 1 || !strings.Contains(r.stderr, `queue "mail" holds 1 scheduled`) {
		t.Errorf("forget of a queue with a job: exit %d, stderr %q", r.code, r.stderr)
	}
	r = tb.run(t, "queues", "forget", "dl")
	if r.code != 1 || !strings.Contains(r.stderr, "2 dead records") {
		t.Errorf("forget of a queue with dead records: exit %d, stderr %q", r.code, r.stderr)
	}
	if ok, _ := protocol.Admin(tb.b).Known(tb.ctx, "mail"); !ok {
		t.Fatal("a refused forget removed the queue")
	}
	r = tb.run(t, "queues", "forget", "nosuch")
	if r.code != 1 || !strings.Contains(r.stderr, `queue "nosuch" is not known`) {
		t.Errorf("forget of an unknown queue: exit %d, stderr %q", r.code, r.stderr)
	}

	// Empty it, with a pause and a cap set: then it can be forgotten.
	tb.ok(t, "queues", "pause", "mail")
	tb.ok(t, "queues", "cap", "mail", "4")
	if _, err := tb.b.Cancel(tb.ctx, "mail", "a"); err != nil {
		t.Fatal(err)
	}
	if out := tb.ok(t, "queues", "forget", "mail"); out != "forgot queue mail\n" {
		t.Errorf("forget: %q", out)
	}
	if out := tb.ok(t, "queues", "ls"); strings.Contains(out, "mail") {
		t.Errorf("queues ls lists a forgotten queue:\n%s", out)
	}
	if out := tb.ok(t, "stats"); strings.Contains(out, "mail") {
		t.Errorf("stats lists a forgotten queue:\n%s", out)
	}
	k := testkit.Key(t, tb.b, "mail", "controls")
	if n := tb.rdb.Exists(tb.ctx, k).Val(); n != 0 {
		t.Errorf("the forgotten queue's controls are left")
	}
	// A new use lists it again, with no pause left over.
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "b", Queue: "mail", Type: "mail.send", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "mail"))
	if err != nil || st.Paused || len(st.Caps) != 0 || st.Scheduled != 1 {
		t.Errorf("after a new enqueue: %+v, %v", st, err)
	}
}

// TestQueuesLimit: queues limit sets and clears a queue's and a type's
// rate limit as the broker stores them; queues ls shows them (table and
// --json) beside the caps; bad limits are refused as usage errors.
func TestQueuesLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "a", Queue: "sms", Type: "sms.send", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if out := tb.ok(t, "queues", "limit", "sms", "10/1s"); out != "limited queue sms to 10/1s\n" {
		t.Errorf("limit: %q", out)
	}
	if out := tb.ok(t, "queues", "limit", "sms", "--type", "sms.send", "5/1m", "--burst", "3"); out != "limited job type sms.send in queue sms to 5/1m burst 3\n" {
		t.Errorf("limit --type: %q", out)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "sms"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]job.RateLimit{"": {Count: 10, Per: time.Second, Burst: 1}, "sms.send": {Count: 5, Per: time.Minute, Burst: 3}}
	if len(st.RateLimits) != 2 || st.RateLimits[""] != want[""] || st.RateLimits["sms.send"] != want["sms.send"] {
		t.Fatalf("stored limits %+v, want %+v", st.RateLimits, want)
	}
	tb.ok(t, "queues", "cap", "sms", "2")
	out := tb.ok(t, "queues", "ls")
	if !strings.Contains(out, "LIMITS") || !strings.Contains(out, "10/1s,sms.send=5/1m burst 3") || !strings.Contains(out, " 2 ") {
		t.Errorf("queues ls:\n%s", out)
	}
	var ls struct {
		Queues []struct {
			Queue  string         `json:"queue"`
			Caps   map[string]int `json:"caps"`
			Limits map[string]struct {
				Count int   `json:"count"`
				PerMS int64 `json:"per_ms"`
				Burst int   `json:"burst"`
			} `json:"limits"`
		} `json:"queues"`
	}
	tb.okJSON(t, &ls, "queues", "ls")
	if len(ls.Queues) != 1 || ls.Queues[0].Caps[""] != 2 || ls.Queues[0].Limits[""].Count != 10 || ls.Queues[0].Limits[""].PerMS != 1000 ||
		ls.Queues[0].Limits["sms.send"].Burst != 3 || ls.Queues[0].Limits["sms.send"].PerMS != 60000 {
		t.Errorf("queues ls --json: %+v", ls.Queues)
	}
	if out := tb.ok(t, "queues", "limit", "sms", "--clear"); out != "cleared the rate limit of queue sms\n" {
		t.Errorf("clear: %q", out)
	}
	st, _ = testkit.OneStats(tb.b.Stats(tb.ctx, "sms"))
	if _, ok := st.RateLimits[""]; ok || len(st.RateLimits) != 1 {
		t.Errorf("after --clear: %+v", st.RateLimits)
	}
	for _, args := range [][]string{
		{"queues", "limit", "sms"},
		{"queues", "limit", "sms", "10"},
		{"queues", "limit", "sms", "0/1s"},
		{"queues", "limit", "sms", "10/0s"},
		{"queues", "limit", "sms", "ten/1s"},
		{"queues", "limit", "sms", "10/1s", "--burst", "-1"},
		{"queues", "limit", "sms", "10/1s", "--clear"},
		{"queues", "limit", "sms", "--clear", "--burst", "2"},
		{"queues", "limit", "bad queue", "10/1s"},
	} {
		if r := tb.run(t, args...); r.code != 2 {
			t.Errorf("delayq %q: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
	st2, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "sms"))
	if len(st2.RateLimits) != 1 {
		t.Errorf("refused limits changed what is stored: %+v", st2.RateLimits)
	}
	// A strict window, with slack; flags that do not go with it are refused.
	for _, args := range [][]string{
		{"queues", "limit", "sms", "10/1s", "--strict", "--burst", "2"},
		{"queues", "limit", "sms", "10/1s", "--slack", "100ms"},
		{"queues", "limit", "sms", "10/1s", "--strict", "--slack", "-1s"},
		{"queues", "limit", "sms", "--clear", "--strict"},
	} {
		if r := tb.run(t, args...); r.code != 2 {
			t.Errorf("delayq %q: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
	if out := tb.ok(t, "queues", "limit", "sms", "20/1s", "--strict", "--slack", "150ms"); out != "limited queue sms to 20/1s strict slack 150ms\n" {
		t.Errorf("limit --strict: %q", out)
	}
	st, _ = testkit.OneStats(tb.b.Stats(tb.ctx, "sms"))
	if r := st.RateLimits[""]; !r.Strict || r.Count != 20 || r.Per != time.Second || r.Slack != 150*time.Millisecond {
		t.Errorf("stored strict limit %+v", r)
	}
	var strict struct {
		Queues []struct {
			Limits map[string]struct {
				Burst   int   `json:"burst"`
				Strict  bool  `json:"strict"`
				SlackMS int64 `json:"slack_ms"`
			} `json:"limits"`
		} `json:"queues"`
	}
	tb.okJSON(t, &strict, "queues", "ls")
	if l := strict.Queues[0].Limits[""]; !l.Strict || l.SlackMS != 150 || l.Burst != 20 {
		t.Errorf("queues ls --json strict limit: %+v", l)
	}
	if out := tb.ok(t, "queues", "ls"); !strings.Contains(out, "20/1s strict slack 150ms") {
		t.Errorf("queues ls with a strict limit:\n%s", out)
	}
}
