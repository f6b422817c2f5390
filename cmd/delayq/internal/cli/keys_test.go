package cli_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
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
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "imports")); err != nil || st.HeldByKey != 2 {
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
	want := "KEY    HELD  RUNNING  CAP      RATE  PAUSED  REASON\n" +
		"acme   5     1        1        -     no      cap\n" +
		"gamma  2     0        1        -     yes     paused\n" +
		"beta   1     2        2 (own)  -     no      cap\n" +
		"3 keys hold jobs back, 1 paused; default key cap 1, default key rate none, fair turns off\n"
	if out != want {
		t.Errorf("keys ls:\n%s\nwant\n%s", out, want)
	}
	var ls heldKeysOut
	tb.okJSON(t, &ls, "keys", "ls", "imports", "--top", "1")
	if ls.Queue != "imports" || ls.Holding != 3 || ls.PausedKeys != 1 || ls.DefaultCap != 1 || ls.DefaultRate == nil || *ls.DefaultRate != "" || ls.FairKeys == nil || *ls.FairKeys || len(ls.Keys) != 1 ||
		ls.Keys[0].Key != "acme" || ls.Keys[0].Held != 5 || ls.Keys[0].Running != 1 || ls.Keys[0].Cap != 1 || ls.Keys[0].OwnCap || ls.Keys[0].Paused || ls.Keys[0].Reason != "cap" ||
		ls.Keys[0].Rate == nil || *ls.Keys[0].Rate != "" || ls.Keys[0].OwnRate == nil || *ls.Keys[0].OwnRate || ls.Keys[0].WaitsForToken == nil || *ls.Keys[0].WaitsForToken ||
		ls.Keys[0].WaitsForTurn == nil || *ls.Keys[0].WaitsForTurn {
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

// heldKeysOut is the --json output of keys ls; the pointers tell a
// missing field from a zero one.
type heldKeysOut struct {
	Queue       string  `json:"queue"`
	Holding     int64   `json:"holding"`
	PausedKeys  int64   `json:"paused_keys"`
	DefaultCap  int     `json:"default_cap"`
	DefaultRate *string `json:"default_rate"`
	FairKeys    *bool   `json:"fair_keys"`
	Keys        []struct {
		Key           string  `json:"key"`
		Held          int64   `json:"held"`
		Running       int64   `json:"running"`
		Cap           int     `json:"cap"`
		OwnCap        bool    `json:"own_cap"`
		Rate          *string `json:"rate"`
		OwnRate       *bool   `json:"own_rate"`
		WaitsForToken *bool   `json:"waits_for_token"`
		WaitsForTurn  *bool   `json:"waits_for_turn"`
		Weight        *int    `json:"weight"`
		Paused        bool    `json:"paused"`
		Reason        string  `json:"reason"`
	} `json:"keys"`
}

// keyControls is what the per-key controls of queue q hold in Redis (its
// controls hash with the default key cap and rate, the keys' own caps
// and rates, the held keys, the keys waiting for a token) and its
// schedule, to tell that a refused command changed nothing.
func (tb *testBundle) keyControls(t *testing.T, q string) string {
	t.Helper()
	controls := tb.key(q, "controls")
	prefix := strings.TrimSuffix(controls, "controls")
	var b strings.Builder
	for _, h := range []string{controls, prefix + "keycaps", prefix + "keyrates", prefix + "keyweights"} {
		m, err := tb.rdb.HGetAll(tb.ctx, h).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "%s %s=%s\n", h, k, m[k])
		}
	}
	for _, z := range []string{prefix + "keyheld", prefix + "keywait", tb.key(q, "scheduled")} {
		zs, err := tb.rdb.ZRangeWithScores(tb.ctx, z, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %v\n", z, zs)
	}
	return b.String()
}

// heldKey is key's entry of HeldKeys of q (Key "" when it is not listed),
// with the queue's.
func (tb *testBundle) heldKey(t *testing.T, q, key string) (broker.HeldKey, broker.HeldKeys) {
	t.Helper()
	hk, err := tb.b.HeldKeys(tb.ctx, q, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range hk.Keys {
		if k.Key == key {
			return k, hk
		}
	}
	return broker.HeldKey{}, hk
}

// TestKeysCap: delayq keys cap sets the default cap of every key, and
// with --key a key's own, which wins; each takes effect for the claims
// (held jobs listed by HeldKeys); 0 clears them; --json prints queue, key
// and cap. Bad input exits 2 naming what was wrong, and a queue never used
// exits 1 (unless --create); neither changes anything.
func TestKeysCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 3 {
		all = append(all, keyedEnv(fmt.Sprintf("a%d", i), "imports", "acme"), keyedEnv(fmt.Sprintf("b%d", i), "imports", "beta"))
	}
	if err := tb.b.Enqueue(tb.ctx, all...); err != nil {
		t.Fatal(err)
	}
	if out := tb.ok(t, "keys", "cap", "imports", "1"); out != "capped each key of queue imports at 1 running (the default: a key's own cap wins)\n" {
		t.Errorf("keys cap (default): %q", out)
	}
	if out := tb.ok(t, "keys", "cap", "imports", "2", "--key", "beta"); out != "capped key beta in queue imports at 2 running\n" {
		t.Errorf("keys cap --key: %q", out)
	}
	if ids := tb.claimIDs(t, "imports"); !slices.Equal(ids, []string{"a0", "b0", "b1"}) {
		t.Fatalf("claimed %v, want acme's first (default cap 1) and beta's first 2 (own cap 2)", ids)
	}
	acme, hk := tb.heldKey(t, "imports", "acme")
	beta, _ := tb.heldKey(t, "imports", "beta")
	if hk.DefaultCap != 1 || acme.Held != 2 || acme.Cap != 1 || acme.OwnCap || acme.Reason != "cap" ||
		beta.Held != 1 || beta.Cap != 2 || !beta.OwnCap || beta.Reason != "cap" {
		t.Fatalf("held keys: default cap %d, acme %+v, beta %+v", hk.DefaultCap, acme, beta)
	}

	var res map[string]any
	tb.okJSON(t, &res, "keys", "cap", "imports", "3", "--key", "beta")
	if len(res) != 3 || res["queue"] != "imports" || res["key"] != "beta" || res["cap"] != float64(3) {
		t.Errorf("keys cap --json: %v, want exactly queue, key and cap", res)
	}
	tb.okJSON(t, &res, "keys", "cap", "imports", "1")
	if len(res) != 3 || res["queue"] != "imports" || res["key"] != "" || res["cap"] != float64(1) {
		t.Errorf("keys cap --json of the default: %v", res)
	}
	// beta's own 3 let its held job run.
	if ids := tb.claimIDs(t, "imports"); !slices.Equal(ids, []string{"b2"}) {
		t.Fatalf("claimed %v after beta's own cap of 3, want b2", ids)
	}

	// Bad input: exit 2, the error names it, nothing changes.
	before := tb.keyControls(t, "imports")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "cap", "imports"}, "expected a queue name and a cap"},
		{[]string{"keys", "cap", "imports", "1", "2"}, "expected a queue name and a cap"},
		{[]string{"keys", "cap", "imports", "-1"}, "unknown shorthand flag: '1' in -1"},
		{[]string{"keys", "cap", "imports", "x"}, `invalid cap "x"`},
		{[]string{"keys", "cap", "imports", "1.5"}, `invalid cap "1.5"`},
		{[]string{"keys", "cap", "no spaces", "1"}, "invalid queue"},
		{[]string{"keys", "cap", "imports", "1", "--key", "a b"}, "invalid --key"},
		{[]string{"keys", "cap", "imports", "1", "--key", "a#b"}, "invalid --key"},
		{[]string{"keys", "cap", "imports", "1", "--key", ""}, "invalid --key: it is empty"},
		{[]string{"keys", "cap", "imports", "1", "--key", strings.Repeat("k", 129)}, "invalid --key"},
	} {
		r := tb.run(t, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("delayq %q: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := tb.run(t, "keys", "cap", "nosuch", "1", "--key", "acme"); r.code != 1 || !strings.Contains(r.stderr, `queue "nosuch" was never used`) || !strings.Contains(r.stderr, "--create") {
		t.Errorf("keys cap of an unused queue: exit %d (%q), want 1", r.code, r.stderr)
	}
	if after := tb.keyControls(t, "imports"); after != before {
		t.Errorf("refused calls changed the key controls:\n%s\nto\n%s", before, after)
	}
	if ok, err := protocol.Admin(tb.b).Known(tb.ctx, "nosuch"); ok || err != nil {
		t.Errorf("a refused cap made the unused queue known (%v)", err)
	}

	// Clearing: beta's own cap, then the default; the held jobs run.
	if out := tb.ok(t, "keys", "cap", "imports", "0", "--key", "beta"); out != "cleared the own cap of key beta in queue imports (the default key cap applies to it)\n" {
		t.Errorf("keys cap 0 --key: %q", out)
	}
	if beta, hk := tb.heldKey(t, "imports", "beta"); beta.OwnCap || hk.DefaultCap != 1 {
		t.Errorf("beta's own cap after it was cleared: %+v (default %d)", beta, hk.DefaultCap)
	}
	if out := tb.ok(t, "keys", "cap", "imports", "0"); out != "cleared the default key cap of queue imports (keys with a cap of their own keep it)\n" {
		t.Errorf("keys cap 0: %q", out)
	}
	if _, hk := tb.heldKey(t, "imports", "acme"); hk.DefaultCap != 0 || hk.Holding != 0 {
		t.Errorf("after clearing the default: %+v", hk)
	}
	if ids := tb.claimIDs(t, "imports"); !slices.Equal(ids, []string{"a1", "a2"}) {
		t.Fatalf("claimed %v after every cap was cleared, want acme's held a1 and a2", ids)
	}
	if out := tb.ok(t, "keys", "cap", "nosuch", "2", "--create"); out != "capped each key of queue nosuch at 2 running (the default: a key's own cap wins)\n" {
		t.Errorf("keys cap --create: %q", out)
	}
	if _, hk := tb.heldKey(t, "nosuch", ""); hk.DefaultCap != 2 {
		t.Errorf("keys cap --create stored default %d, want 2", hk.DefaultCap)
	}
}

// TestKeysLimit: delayq keys limit sets the default rate limit of every
// key, and with --key a key's own, which wins; each takes effect for the
// claims (HeldKeys gives the keys' rates and reason "rate"); --clear
// removes them; --json prints the limit as queues limit does, with the
// key. Bad input (as for queues limit, or a bad --key) exits 2 naming what
// was wrong, a queue never used exits 1 (unless --create); neither
// changes anything.
func TestKeysLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 3 {
		all = append(all, keyedEnv(fmt.Sprintf("a%d", i), "sms", "acme"), keyedEnv(fmt.Sprintf("b%d", i), "sms", "beta"))
	}
	if err := tb.b.Enqueue(tb.ctx, all...); err != nil {
		t.Fatal(err)
	}
	if out := tb.ok(t, "keys", "limit", "sms", "1/1m", "--strict"); out != "limited each key of queue sms to 1/1m strict (the default: a key's own limit wins)\n" {
		t.Errorf("keys limit (default): %q", out)
	}
	if out := tb.ok(t, "keys", "limit", "sms", "2/1m", "--key", "beta", "--burst", "2"); out != "limited key beta in queue sms to 2/1m burst 2\n" {
		t.Errorf("keys limit --key: %q", out)
	}
	if ids := tb.claimIDs(t, "sms"); !slices.Equal(ids, []string{"a0", "b0", "b1"}) {
		t.Fatalf("claimed %v, want acme's first (default 1/1m) and beta's first 2 (own 2/1m burst 2)", ids)
	}
	def := job.RateLimit{Count: 1, Per: time.Minute, Strict: true}
	acme, hk := tb.heldKey(t, "sms", "acme")
	beta, _ := tb.heldKey(t, "sms", "beta")
	if hk.DefaultRate != def || acme.Held != 2 || acme.Rate != def || acme.OwnRate || !acme.WaitsForToken || acme.Reason != "rate" ||
		beta.Held != 1 || beta.Rate.Count != 2 || beta.Rate.Per != time.Minute || beta.Rate.Burst != 2 || beta.Rate.Strict || !beta.OwnRate || beta.Reason != "rate" {
		t.Fatalf("held keys: default %+v, acme %+v, beta %+v", hk.DefaultRate, acme, beta)
	}

	var res map[string]any
	tb.okJSON(t, &res, "keys", "limit", "sms", "3/1s", "--key", "beta", "--strict", "--slack", "100ms")
	want := map[string]any{"queue": "sms", "key": "beta", "count": float64(3), "per_ms": float64(1000), "burst": float64(3), "strict": true, "slack_ms": float64(100), "cleared": false}
	if !maps.Equal(res, want) {
		t.Errorf("keys limit --json: %v, want %v", res, want)
	}
	if beta, _ := tb.heldKey(t, "sms", "beta"); beta.Rate != (job.RateLimit{Count: 3, Per: time.Second, Strict: true, Slack: 100 * time.Millisecond}) || !beta.OwnRate {
		t.Errorf("beta after its strict limit: %+v", beta)
	}

	// Bad input: exit 2, the error names it, nothing changes.
	before := tb.keyControls(t, "sms")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "limit", "sms"}, "expected a queue name and COUNT/PERIOD"},
		{[]string{"keys", "limit", "sms", "10"}, `invalid limit "10"`},
		{[]string{"keys", "limit", "sms", "0/1s"}, `invalid limit "0/1s"`},
		{[]string{"keys", "limit", "sms", "10/0s"}, "the period must be a duration of at least 1ms"},
		{[]string{"keys", "limit", "sms", "ten/1s"}, `invalid limit "ten/1s"`},
		{[]string{"keys", "limit", "sms", "10/1s", "--burst", "-1"}, "invalid --burst -1"},
		{[]string{"keys", "limit", "sms", "10/1s", "--clear"}, "--clear takes only the queue name"},
		{[]string{"keys", "limit", "sms", "--clear", "--burst", "2"}, "not with --clear"},
		{[]string{"keys", "limit", "sms", "--clear", "--strict"}, "not with --clear"},
		{[]string{"keys", "limit", "sms", "10/1s", "--strict", "--burst", "2"}, "not with --strict"},
		{[]string{"keys", "limit", "sms", "10/1s", "--slack", "100ms"}, "--slack widens a --strict window only"},
		{[]string{"keys", "limit", "sms", "10/1s", "--strict", "--slack", "-1s"}, "invalid --slack"},
		{[]string{"keys", "limit", "bad queue", "10/1s"}, "invalid queue"},
		{[]string{"keys", "limit", "sms", "10/1s", "--key", "a b"}, "invalid --key"},
		{[]string{"keys", "limit", "sms", "--clear", "--key", "a#b"}, "invalid --key"},
		{[]string{"keys", "limit", "sms", "10/1s", "--key", ""}, "invalid --key: it is empty"},
	} {
		r := tb.run(t, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("delayq %q: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	for _, args := range [][]string{{"keys", "limit", "smss", "10/1s"}, {"keys", "limit", "smss", "--clear", "--key", "acme"}} {
		if r := tb.run(t, args...); r.code != 1 || !strings.Contains(r.stderr, `queue "smss" was never used`) || !strings.Contains(r.stderr, "--create") {
			t.Errorf("delayq %q: exit %d (%q), want 1", args, r.code, r.stderr)
		}
	}
	if after := tb.keyControls(t, "sms"); after != before {
		t.Errorf("refused calls changed the key controls:\n%s\nto\n%s", before, after)
	}
	if ok, err := protocol.Admin(tb.b).Known(tb.ctx, "smss"); ok || err != nil {
		t.Errorf("a refused limit made the unused queue known (%v)", err)
	}

	// Clearing: beta's own limit (the default applies to it again), then
	// the default; the held jobs run. A cleared limit sends its key's held
	// jobs back to the schedule, so beta is paused meanwhile to stay
	// listed by HeldKeys.
	tb.ok(t, "keys", "pause", "sms", "beta")
	if out := tb.ok(t, "keys", "limit", "sms", "--clear", "--key", "beta"); out != "cleared the own rate limit of key beta in queue sms (the default key rate limit applies to it)\n" {
		t.Errorf("keys limit --clear --key: %q", out)
	}
	if beta, _ := tb.heldKey(t, "sms", "beta"); beta.Key != "beta" || beta.OwnRate || beta.Rate != def {
		t.Errorf("beta after its own limit was cleared: %+v, want the default", beta)
	}
	tb.ok(t, "keys", "resume", "sms", "beta")
	tb.okJSON(t, &res, "keys", "limit", "sms", "--clear")
	want = map[string]any{"queue": "sms", "key": "", "count": float64(0), "per_ms": float64(0), "burst": float64(1), "strict": false, "slack_ms": float64(0), "cleared": true}
	if !maps.Equal(res, want) {
		t.Errorf("keys limit --clear --json: %v, want %v", res, want)
	}
	if _, hk := tb.heldKey(t, "sms", ""); hk.DefaultRate != (job.RateLimit{}) || hk.Holding != 0 {
		t.Errorf("after clearing the default: %+v", hk)
	}
	if ids := tb.claimIDs(t, "sms"); !slices.Equal(ids, []string{"a1", "a2", "b2"}) {
		t.Fatalf("claimed %v after every limit was cleared, want the 3 held", ids)
	}
	if out := tb.ok(t, "keys", "limit", "smss", "5/1s", "--key", "acme", "--create"); out != "limited key acme in queue smss to 5/1s\n" {
		t.Errorf("keys limit --create: %q", out)
	}
}

// TestKeysListRate: a key whose jobs wait for a token of its strict limit
// of 1 per minute is listed by keys ls with its rate and the reason
// "rate", in the table and in JSON, and the footer gives the default key
// cap and rate.
func TestKeysListRate(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, keyedEnv("a0", "sms", "acme"), keyedEnv("a1", "sms", "acme"), keyedEnv("a2", "sms", "acme")); err != nil {
		t.Fatal(err)
	}
	tb.ok(t, "keys", "limit", "sms", "1/1m", "--strict", "--key", "acme")
	tb.ok(t, "keys", "limit", "sms", "10/1s", "--burst", "5")
	tb.ok(t, "keys", "cap", "sms", "4")
	if ids := tb.claimIDs(t, "sms"); !slices.Equal(ids, []string{"a0"}) {
		t.Fatalf("claimed %v, want a0 alone (1 a minute)", ids)
	}
	out := tb.ok(t, "keys", "ls", "sms")
	want := "KEY   HELD  RUNNING  CAP  RATE               PAUSED  REASON\n" +
		"acme  2     1        4    1/1m strict (own)  no      rate\n" +
		"1 keys hold jobs back, 0 paused; default key cap 4, default key rate 10/1s burst 5, fair turns off\n"
	if out != want {
		t.Errorf("keys ls:\n%s\nwant\n%s", out, want)
	}
	var ls heldKeysOut
	tb.okJSON(t, &ls, "keys", "ls", "sms")
	if ls.DefaultRate == nil || *ls.DefaultRate != "10/1s burst 5" || ls.DefaultCap != 4 || ls.Holding != 1 || len(ls.Keys) != 1 {
		t.Fatalf("keys ls --json: %+v", ls)
	}
	k := ls.Keys[0]
	if k.Key != "acme" || k.Held != 2 || k.Running != 1 || k.Cap != 4 || k.OwnCap || k.Rate == nil || *k.Rate != "1/1m strict" ||
		k.OwnRate == nil || !*k.OwnRate || k.WaitsForToken == nil || !*k.WaitsForToken || k.Paused || k.Reason != "rate" {
		t.Errorf("keys ls --json key: %+v", k)
	}
	// The default: a key without its own limit shows it, not "(own)".
	if err := tb.b.Enqueue(tb.ctx, keyedEnv("b0", "sms", "beta")); err != nil {
		t.Fatal(err)
	}
	tb.ok(t, "keys", "pause", "sms", "beta")
	tb.claimIDs(t, "sms")
	if out := tb.ok(t, "keys", "ls", "sms"); !strings.Contains(out, "beta  1     0        4    10/1s burst 5      yes     paused\n") {
		t.Errorf("keys ls with beta paused under the default rate:\n%s", out)
	}
	// Nothing held, defaults set: said so, with the defaults.
	if err := tb.b.Enqueue(tb.ctx, keyedEnv("x", "quiet", "k")); err != nil {
		t.Fatal(err)
	}
	tb.ok(t, "keys", "limit", "quiet", "3/1s")
	if out := tb.ok(t, "keys", "ls", "quiet"); out != "no key holds jobs back in queue quiet, and none is paused; default key cap none, default key rate 3/1s, fair turns off\n" {
		t.Errorf("keys ls of a queue holding nothing with a default rate: %q", out)
	}
}

// TestKeysFair: delayq keys fair turns fair turns between keys on: a claim
// of 2 takes one job of each key, the rest wait for their turn (held by
// their key, HeldKeys reason "turn", keys ls the reason turn and
// waits_for_turn in JSON) and a due job with a key enqueued meanwhile
// goes straight to its key's held set; off sends them back to the
// schedule. --json prints queue and fair. Bad input exits 2 naming what
// was wrong, a queue never used exits 1 (unless --create); neither changes
// anything.
func TestKeysFair(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 4 {
		all = append(all, keyedEnv(fmt.Sprintf("a%d", i), "imports", "acme"))
	}
	all = append(all, keyedEnv("b0", "imports", "beta"), keyedEnv("b1", "imports", "beta"))
	if err := tb.b.Enqueue(tb.ctx, all...); err != nil {
		t.Fatal(err)
	}

	// Bad input: exit 2, the error names it, nothing changes.
	before := tb.keyControls(t, "imports")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "fair", "imports"}, "expected a queue name and on or off"},
		{[]string{"keys", "fair", "imports", "on", "off"}, "expected a queue name and on or off"},
		{[]string{"keys", "fair", "imports", "yes"}, `invalid switch "yes": want on or off`},
		{[]string{"keys", "fair", "imports", "ON"}, `invalid switch "ON"`},
		{[]string{"keys", "fair", "imports", "1"}, `invalid switch "1"`},
		{[]string{"keys", "fair", "imports", ""}, `invalid switch ""`},
		{[]string{"keys", "fair", "no spaces", "on"}, "invalid queue"},
	} {
		r := tb.run(t, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("delayq %q: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := tb.run(t, "keys", "fair", "nosuch", "on"); r.code != 1 || !strings.Contains(r.stderr, `queue "nosuch" was never used`) || !strings.Contains(r.stderr, "--create") {
		t.Errorf("keys fair of an unused queue: exit %d (%q), want 1", r.code, r.stderr)
	}
	if after := tb.keyControls(t, "imports"); after != before {
		t.Errorf("refused calls changed the key controls:\n%s\nto\n%s", before, after)
	}
	if ok, err := protocol.Admin(tb.b).Known(tb.ctx, "nosuch"); ok || err != nil {
		t.Errorf("a refused keys fair made the unused queue known (%v)", err)
	}

	// On: a claim of 2 deals one job to each key.
	if out := tb.ok(t, "keys", "fair", "imports", "on"); out != "fair turns between keys on in queue imports\n" {
		t.Errorf("keys fair on: %q", out)
	}
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "imports", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range res.Jobs {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a0", "b0"}) {
		t.Fatalf("a fair claim of 2 took %v, want a0 and b0 (one of each key)", ids)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "imports")); err != nil || st.HeldByKey != 4 {
		t.Fatalf("stats %+v, %v; want 4 held waiting for a turn", st, err)
	}
	// A due job with a key enqueued now waits for its turn at once.
	if err := tb.b.Enqueue(tb.ctx, keyedEnv("g0", "imports", "gamma")); err != nil {
		t.Fatal(err)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "imports")); err != nil || st.HeldByKey != 5 {
		t.Fatalf("stats %+v, %v; want gamma's new job held beside the 4", st, err)
	}
	if acme, _ := tb.heldKey(t, "imports", "acme"); acme.Held != 3 || !acme.WaitsForTurn || acme.Reason != "turn" {
		t.Fatalf("acme %+v, want 3 held waiting for its turn", acme)
	}
	out := tb.ok(t, "keys", "ls", "imports")
	want := "KEY    HELD  RUNNING  CAP  RATE  PAUSED  REASON\n" +
		"acme   3     0        -    -     no      turn\n" +
		"beta   1     0        -    -     no      turn\n" +
		"gamma  1     0        -    -     no      turn\n" +
		"3 keys hold jobs back, 0 paused; default key cap none, default key rate none, fair turns on\n"
	if out != want {
		t.Errorf("keys ls:\n%s\nwant\n%s", out, want)
	}
	var ls heldKeysOut
	tb.okJSON(t, &ls, "keys", "ls", "imports", "--top", "1")
	if ls.Holding != 3 || len(ls.Keys) != 1 {
		t.Fatalf("keys ls --top 1 --json: %+v", ls)
	}
	if k := ls.Keys[0]; k.Key != "acme" || k.Held != 3 || k.Reason != "turn" || k.WaitsForTurn == nil || !*k.WaitsForTurn || k.WaitsForToken == nil || *k.WaitsForToken || k.Paused {
		t.Errorf("keys ls --json key: %+v", k)
	}

	// Off: the jobs waiting for a turn go back to the schedule.
	var res2 map[string]any
	tb.okJSON(t, &res2, "keys", "fair", "imports", "off")
	if len(res2) != 2 || res2["queue"] != "imports" || res2["fair"] != false {
		t.Errorf("keys fair off --json: %v, want exactly queue and fair", res2)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "imports")); err != nil || st.HeldByKey != 0 || st.Held != 0 {
		t.Fatalf("after keys fair off: %+v, %v; want nothing held", st, err)
	}
	tb.okJSON(t, &ls, "keys", "ls", "imports")
	if ls.Holding != 0 || len(ls.Keys) != 0 {
		t.Errorf("keys ls after keys fair off: %+v", ls)
	}
	if ids := tb.claimIDs(t, "imports"); !slices.Equal(ids, []string{"a1", "a2", "a3", "b1", "g0"}) {
		t.Fatalf("claimed %v after keys fair off, want the 5 that waited", ids)
	}
	tb.okJSON(t, &res2, "keys", "fair", "imports", "on")
	if len(res2) != 2 || res2["queue"] != "imports" || res2["fair"] != true {
		t.Errorf("keys fair on --json: %v", res2)
	}
	if out := tb.ok(t, "keys", "fair", "imports", "off"); out != "fair turns between keys off in queue imports (the jobs waiting for a turn went back to the schedule)\n" {
		t.Errorf("keys fair off: %q", out)
	}
	if out := tb.ok(t, "keys", "fair", "nosuch", "on", "--create"); out != "fair turns between keys on in queue nosuch\n" {
		t.Errorf("keys fair --create: %q", out)
	}
	if v, err := tb.rdb.HGet(tb.ctx, tb.key("nosuch", "controls"), "kf").Result(); err != nil || v != "1" {
		t.Errorf("keys fair --create stored kf %q, %v; want 1", v, err)
	}
}

// TestKeysWeight: delayq keys weight sets a key's weight in the fair
// turns: with acme at 3 a claim of 4 takes 3 of acme's for 1 of beta's;
// keys ls adds a WEIGHT column and --json a weight; 1 removes the weight
// (and the column). --json prints queue, key and weight. Bad input exits
// 2 naming what was wrong, a queue never used exits 1 (unless --create);
// neither changes anything.
func TestKeysWeight(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var all []*job.Envelope
	for i := range 8 {
		all = append(all, keyedEnv(fmt.Sprintf("a%d", i), "imports", "acme"), keyedEnv(fmt.Sprintf("b%d", i), "imports", "beta"))
	}
	if err := tb.b.Enqueue(tb.ctx, all...); err != nil {
		t.Fatal(err)
	}

	// Bad input: exit 2, the error names it, nothing changes.
	before := tb.keyControls(t, "imports")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "weight", "imports", "acme"}, "expected a queue name, a key and a weight"},
		{[]string{"keys", "weight", "imports", "acme", "3", "4"}, "expected a queue name, a key and a weight"},
		{[]string{"keys", "weight", "imports", "acme", "0"}, `invalid weight "0": want a whole number 1 to 1000`},
		{[]string{"keys", "weight", "imports", "acme", "1001"}, `invalid weight "1001"`},
		{[]string{"keys", "weight", "imports", "acme", "-2"}, "in -2"},
		{[]string{"keys", "weight", "imports", "acme", "1.5"}, `invalid weight "1.5"`},
		{[]string{"keys", "weight", "imports", "acme", "x"}, `invalid weight "x"`},
		{[]string{"keys", "weight", "imports", "", "3"}, "invalid key"},
		{[]string{"keys", "weight", "imports", "a b", "3"}, "invalid key"},
		{[]string{"keys", "weight", "no spaces", "acme", "3"}, "invalid queue"},
	} {
		r := tb.run(t, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("delayq %q: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := tb.run(t, "keys", "weight", "nosuch", "acme", "3"); r.code != 1 || !strings.Contains(r.stderr, `queue "nosuch" was never used`) || !strings.Contains(r.stderr, "--create") {
		t.Errorf("keys weight of an unused queue: exit %d (%q), want 1", r.code, r.stderr)
	}
	if after := tb.keyControls(t, "imports"); after != before {
		t.Errorf("refused calls changed the key controls:\n%s\nto\n%s", before, after)
	}
	if ok, err := protocol.Admin(tb.b).Known(tb.ctx, "nosuch"); ok || err != nil {
		t.Errorf("a refused keys weight made the unused queue known (%v)", err)
	}

	if out := tb.ok(t, "keys", "weight", "imports", "acme", "3"); out != "set the weight of key acme in queue imports to 3 in the fair turns\n" {
		t.Errorf("keys weight: %q", out)
	}
	tb.ok(t, "keys", "fair", "imports", "on")
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "imports", 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range res.Jobs {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a0", "a1", "a2", "b0"}) {
		t.Fatalf("a fair claim of 4 with acme at weight 3 took %v, want a0, a1, a2 and b0", ids)
	}
	out := tb.ok(t, "keys", "ls", "imports")
	want := "KEY   HELD  RUNNING  CAP  RATE  WEIGHT  PAUSED  REASON\n" +
		"beta  7     0        -    -     1       no      turn\n" +
		"acme  5     0        -    -     3       no      turn\n" +
		"2 keys hold jobs back, 0 paused; default key cap none, default key rate none, fair turns on\n"
	if out != want {
		t.Errorf("keys ls:\n%s\nwant\n%s", out, want)
	}
	var ls heldKeysOut
	tb.okJSON(t, &ls, "keys", "ls", "imports")
	got := map[string]int{}
	for _, k := range ls.Keys {
		if k.Weight == nil {
			t.Fatalf("keys ls --json: key %s without a weight", k.Key)
		}
		got[k.Key] = *k.Weight
	}
	if got["acme"] != 3 || got["beta"] != 1 || len(got) != 2 {
		t.Errorf("keys ls --json weights %v, want acme 3 and beta 1", got)
	}

	// 1 removes it: no weight stored, no WEIGHT column.
	var res2 map[string]any
	tb.okJSON(t, &res2, "keys", "weight", "imports", "acme", "1")
	if len(res2) != 3 || res2["queue"] != "imports" || res2["key"] != "acme" || res2["weight"] != float64(1) {
		t.Errorf("keys weight --json: %v, want exactly queue, key and weight", res2)
	}
	if n, err := tb.rdb.Exists(tb.ctx, strings.TrimSuffix(tb.key("imports", "controls"), "controls")+"keyweights").Result(); err != nil || n != 0 {
		t.Errorf("keyweights left after weight 1: %d, %v", n, err)
	}
	if out := tb.ok(t, "keys", "ls", "imports"); strings.Contains(out, "WEIGHT") {
		t.Errorf("keys ls with no weight set:\n%s", out)
	}
	if out := tb.ok(t, "keys", "weight", "imports", "acme", "1"); out != "key acme in queue imports back to weight 1 in the fair turns\n" {
		t.Errorf("keys weight 1: %q", out)
	}
	if out := tb.ok(t, "keys", "weight", "nosuch", "acme", "2", "--create"); out != "set the weight of key acme in queue nosuch to 2 in the fair turns\n" {
		t.Errorf("keys weight --create: %q", out)
	}
	if v, err := tb.rdb.HGet(tb.ctx, tb.key("nosuch", "controls"), "kw").Result(); err != nil || v != "1" {
		t.Errorf("keys weight --create stored kw %q, %v; want 1", v, err)
	}
}
