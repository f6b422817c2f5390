package cli_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// keyedEnv is a job of key in queue q.
func keyedEnv(id, q, key string) *job.Envelope {
	return &job.Envelope{ID: id, Queue: q, Type: "import.run", Payload: []byte(`{}`), Key: key}
}

// claimIDs claims up to 10 jobs of q and returns their ids.
func (tb *testBundle) claimIDs(t *testing.T, q string) []string {
	t.Helper()
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, q, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range res.Jobs {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestKeysPauseResume: delayq keys pause holds one key's due jobs while
// the other key's are claimed; resume sends them back and says how many
// (text and --json); bad input exits 2 and an unused queue 1 (unless
// --create), with nothing changed.
func TestKeysPauseResume(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, keyedEnv("a1", "imports", "acme"), keyedEnv("a2", "imports", "acme"), keyedEnv("b1", "imports", "beta")); err != nil {
		t.Fatal(err)
	}
	if out := tb.ok(t, "keys", "pause", "imports", "acme"); out != "paused key acme in queue imports\n" {
		t.Errorf("pause: %q", out)
	}
	if ids := tb.claimIDs(t, "imports"); !slices.Equal(ids, []string{"b1"}) {
		t.Fatalf("claimed %v with acme paused, want [b1]", ids)
	}
	if st, err := tb.b.Stats(tb.ctx, "imports"); err != nil || st.HeldByKey != 2 {
		t.Fatalf("stats %+v, %v; want acme's 2 held", st, err)
	}
	var res struct {
		Queue  string `json:"queue"`
		Key    string `json:"key"`
		Paused bool   `json:"paused"`
		Back   *int64 `json:"held_jobs_back"`
	}
	tb.okJSON(t, &res, "keys", "resume", "imports", "acme")
	if res.Queue != "imports" || res.Key != "acme" || res.Paused || res.Back == nil || *res.Back != 2 {
		t.Fatalf("resume --json: %+v", res)
	}
	if ids := tb.claimIDs(t, "imports"); !slices.Equal(ids, []string{"a1", "a2"}) {
		t.Fatalf("claimed %v after the resume, want a1 and a2", ids)
	}
	if out := tb.ok(t, "keys", "resume", "imports", "acme"); out != "resumed key acme in queue imports: 0 held jobs back on the schedule\n" {
		t.Errorf("resume of a key not paused: %q", out)
	}

	controls := func() map[string]string {
		m, err := tb.rdb.HGetAll(tb.ctx, tb.key("imports", "controls")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := controls()
	for _, args := range [][]string{{"keys", "pause", "imports"}, {"keys", "pause", "imports", "a b"}, {"keys", "pause", "imports", "a#b"},
		{"keys", "resume", "no spaces", "acme"}, {"keys", "pause", "imports", strings.Repeat("k", 129)}, {"keys"}, {"keys", "pause", "imports", ""}} {
		if r := tb.run(t, args...); r.code != 2 {
			t.Errorf("delayq %v: exit %d (%q), want 2", args, r.code, r.stderr)
		}
	}
	if r := tb.run(t, "keys", "pause", "nosuch", "acme"); r.code != 1 || !strings.Contains(r.stderr, `queue "nosuch" was never used`) {
		t.Errorf("pause in an unused queue: exit %d (%q), want 1", r.code, r.stderr)
	}
	if after := controls(); len(before) != len(after) || len(after) != 0 {
		t.Errorf("controls after refused calls: %v -> %v", before, after)
	}
	if n, err := tb.rdb.Exists(tb.ctx, tb.key("nosuch", "controls")).Result(); err != nil || n != 0 {
		t.Errorf("a refused pause wrote the unused queue's controls: %d, %v", n, err)
	}
	if out := tb.ok(t, "keys", "pause", "nosuch", "acme", "--create"); out != "paused key acme in queue nosuch\n" {
		t.Errorf("pause --create: %q", out)
	}
}
