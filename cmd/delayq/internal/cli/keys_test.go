package cli_test

import (
	"fmt"
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

// TestKeysList: delayq keys ls lists the keys holding the most jobs back,
// with their held and running jobs, cap (own or default), pause and
// reason, as a table and as JSON; --top bounds it; bad input exits 2, a
// queue never used 1.
func TestKeysList(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 6 {
		all = append(all, keyedEnv(fmt.Sprintf("a%d", i), "imports", "acme"))
		if i < 3 {
			all = append(all, keyedEnv(fmt.Sprintf("b%d", i), "imports", "beta"))
		}
		if i < 2 {
			all = append(all, keyedEnv(fmt.Sprintf("g%d", i), "imports", "gamma"))
		}
	}
	if err := tb.b.Enqueue(tb.ctx, all...); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "imports", "", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "imports", "beta", 2); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.PauseKey(tb.ctx, "imports", "gamma"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tb.claimIDs(t, "imports")
	}
	out := tb.ok(t, "keys", "ls", "imports")
	want := "KEY    HELD  RUNNING  CAP      PAUSED  REASON\n" +
		"acme   5     1        1        no      cap\n" +
		"gamma  2     0        1        yes     paused\n" +
		"beta   1     2        2 (own)  no      cap\n" +
		"3 keys hold jobs back, 1 paused; default key cap 1\n"
	if out != want {
		t.Errorf("keys ls:\n%s\nwant\n%s", out, want)
	}
	var ls struct {
		Queue      string `json:"queue"`
		Holding    int64  `json:"holding"`
		PausedKeys int64  `json:"paused_keys"`
		DefaultCap int    `json:"default_cap"`
		Keys       []struct {
			Key     string `json:"key"`
			Held    int64  `json:"held"`
			Running int64  `json:"running"`
			Cap     int    `json:"cap"`
			OwnCap  bool   `json:"own_cap"`
			Paused  bool   `json:"paused"`
			Reason  string `json:"reason"`
		} `json:"keys"`
	}
	tb.okJSON(t, &ls, "keys", "ls", "imports", "--top", "1")
	if ls.Queue != "imports" || ls.Holding != 3 || ls.PausedKeys != 1 || ls.DefaultCap != 1 || len(ls.Keys) != 1 ||
		ls.Keys[0].Key != "acme" || ls.Keys[0].Held != 5 || ls.Keys[0].Running != 1 || ls.Keys[0].Cap != 1 || ls.Keys[0].OwnCap || ls.Keys[0].Paused || ls.Keys[0].Reason != "cap" {
		t.Errorf("keys ls --top 1 --json: %+v", ls)
	}
	for _, args := range [][]string{{"keys", "ls"}, {"keys", "ls", "no spaces"}, {"keys", "ls", "imports", "--top", "0"}, {"keys", "ls", "imports", "--top", "1001"}, {"keys", "ls", "imports", "--top", "x"}} {
		if r := tb.run(t, args...); r.code != 2 {
			t.Errorf("delayq %v: exit %d (%q), want 2", args, r.code, r.stderr)
		}
	}
	if r := tb.run(t, "keys", "ls", "nosuch"); r.code != 1 || !strings.Contains(r.stderr, `queue "nosuch" was never used`) {
		t.Errorf("keys ls of an unused queue: exit %d (%q), want 1", r.code, r.stderr)
	}
	// Nothing held: said so.
	if err := tb.b.Enqueue(tb.ctx, keyedEnv("x", "quiet", "k")); err != nil {
		t.Fatal(err)
	}
	if out := tb.ok(t, "keys", "ls", "quiet"); out != "no key holds jobs back in queue quiet, and none is paused\n" {
		t.Errorf("keys ls of a queue holding nothing: %q", out)
	}
}
