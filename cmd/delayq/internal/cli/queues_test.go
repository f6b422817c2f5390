package cli_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
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
	if !strings.Contains(out, "QUEUE  STATE   PAUSED TYPES  PARKED  CAPS  HELD  LIMITS  SCHEDULED  DUE  PROCESSING  DEAD  TRIMMED  WORKERS") || !strings.Contains(out, "mail   paused  -             0       -     0     -       2          2    0           0     -        0") {
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

// TestQueuesCap: delayq queues cap sets a queue's or a type's concurrency
// cap, queues ls shows it with the held jobs, 0 clears it, and bad input is
// refused with nothing changed.
func TestQueuesCap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, id := range []string{"r1", "r2", "r3"} {
		if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: id, Queue: "reports", Type: "report.build", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if out := tb.ok(t, "queues", "cap", "reports", "1", "--type", "report.build"); out != "capped job type report.build in queue reports at 1 running\n" {
		t.Errorf("cap --type: %q", out)
	}
	if out := tb.ok(t, "queues", "cap", "reports", "4"); out != "capped queue reports at 4 running\n" {
		t.Errorf("cap: %q", out)
	}
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "reports", 10, time.Minute)
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claimed %d under a type cap of 1: %v", len(res.Jobs), err)
	}
	out := tb.ok(t, "queues", "ls")
	if !strings.Contains(out, "reports  active  -             0       4,report.build=1  2 cap:report.build=2  -       0          0    1           0     -        0 (jobs held)") {
		t.Errorf("queues ls with caps:\n%s", out)
	}
	var ls struct {
		Queues []struct {
			Caps      map[string]int   `json:"caps"`
			Held      int64            `json:"held"`
			HeldByCap map[string]int64 `json:"held_by_cap"`
		} `json:"queues"`
	}
	tb.okJSON(t, &ls, "queues", "ls")
	if len(ls.Queues) != 1 || ls.Queues[0].Caps[""] != 4 || ls.Queues[0].Caps["report.build"] != 1 || ls.Queues[0].Held != 2 || ls.Queues[0].HeldByCap["report.build"] != 2 {
		t.Errorf("queues ls --json with caps: %+v", ls.Queues)
	}
	for _, args := range [][]string{{"queues", "cap", "reports"}, {"queues", "cap", "reports", "-1"}, {"queues", "cap", "reports", "x"},
		{"queues", "cap", "no spaces", "1"}, {"queues", "cap", "reports", "1", "--type", "bad type"}} {
		if r := tb.run(t, args...); r.code != 2 {
			t.Errorf("delayq %v: exit %d (%q), want 2", args, r.code, r.stderr)
		}
	}
	if out := tb.ok(t, "queues", "cap", "reports", "0", "--type", "report.build"); out != "cleared the concurrency cap of job type report.build in queue reports\n" {
		t.Errorf("cap 0: %q", out)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "reports"))
	if err != nil || st.Held != 0 || st.Scheduled != 2 || len(st.Caps) != 1 {
		t.Errorf("after clearing the type's cap: %+v, %v", st, err)
	}
}

// TestQueuesShowRateHeld: queues ls names the jobs held by a type's rate
// limit, by type, in HELD (table) and held_by_rate (JSON); they count as
// scheduled and due.
func TestQueuesShowRateHeld(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, id := range []string{"s1", "s2", "s3"} {
		if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: id, Queue: "sms", Type: "sms.send", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.SetRateLimit(tb.ctx, "sms", "sms.send", job.RateLimit{Count: 1, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "sms", 10, time.Minute)
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claimed %d under 1/h: %v", len(res.Jobs), err)
	}
	if out := tb.ok(t, "queues", "ls"); !strings.Contains(out, "0 rate:sms.send=2") {
		t.Errorf("queues ls with jobs held by a rate limit:\n%s", out)
	}
	var ls struct {
		Queues []struct {
			HeldByRate map[string]int64 `json:"held_by_rate"`
			Scheduled  int64            `json:"scheduled"`
			Due        int64            `json:"due"`
		} `json:"queues"`
	}
	tb.okJSON(t, &ls, "queues", "ls")
	if len(ls.Queues) != 1 || ls.Queues[0].HeldByRate["sms.send"] != 2 || ls.Queues[0].Scheduled != 2 || ls.Queues[0].Due != 2 {
		t.Errorf("queues ls --json with jobs held by a rate limit: %+v", ls.Queues)
	}
}

// TestQueuesParkedByType: with two types paused, queues ls shows how many
// jobs each holds parked (the table's PARKED column and --json's
// parked_by_type), and so does stats --json; a resume of one type leaves
// the other's count.
func TestQueuesParkedByType(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for i, typ := range []string{"sms.send", "sms.send", "email.send", "email.digest"} {
		e := &job.Envelope{ID: fmt.Sprintf("j%d", i), Queue: "mail", Type: typ, Payload: []byte(`{}`)}
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range []string{"sms.send", "email.send", "push.send"} {
		tb.ok(t, "queues", "pause", "mail", "--type", typ)
	}
	if res, err := testkit.Drive(tb.b).Claim(tb.ctx, "mail", 10, time.Minute); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claimed %+v, %v; want the one email.digest", res.Jobs, err)
	}
	out := tb.ok(t, "queues", "ls")
	if !strings.Contains(out, "email.send,push.send,sms.send  3 parked:email.send=1 parked:sms.send=2  -") {
		t.Errorf("queues ls with three types paused:\n%s", out)
	}
	type parked struct {
		Queues []struct {
			Parked       int64            `json:"parked"`
			ParkedByType map[string]int64 `json:"parked_by_type"`
		} `json:"queues"`
	}
	want := map[string]int64{"sms.send": 2, "email.send": 1}
	for _, cmd := range [][]string{{"queues", "ls"}, {"stats"}} {
		var got parked
		tb.okJSON(t, &got, cmd...)
		if len(got.Queues) != 1 || got.Queues[0].Parked != 3 || !maps.Equal(got.Queues[0].ParkedByType, want) {
			t.Errorf("%v --json: %+v, want 3 parked, %v", cmd, got.Queues, want)
		}
	}
	tb.ok(t, "queues", "resume", "mail", "--type", "sms.send")
	if out := tb.ok(t, "queues", "ls"); !strings.Contains(out, "email.send,push.send  1 parked:email.send=1  -") {
		t.Errorf("queues ls after resuming sms.send:\n%s", out)
	}
	tb.ok(t, "queues", "resume", "mail", "--type", "email.send")
	var none parked
	tb.okJSON(t, &none, "queues", "ls")
	if len(none.Queues) != 1 || none.Queues[0].Parked != 0 || none.Queues[0].ParkedByType == nil || len(none.Queues[0].ParkedByType) != 0 {
		t.Errorf("queues ls --json with nothing parked: %+v, want parked_by_type {}", none.Queues)
	}
}

// TestQueuesForgetIdle: queues forget --idle DURATION unlists the queues
// unused for that long that hold nothing and have no control set, prints
// them (--json too), keeps the others; a duration below
// admin.MinForgetIdle or not a duration is refused with exit 2 and
// nothing forgotten, a failure exits 1.
func TestQueuesForgetIdle(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, q := range []string{"idle1", "idle2", "busy", "paused", "idle3"} {
		if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "j", Queue: q, Type: "t", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if q != "busy" {
			if _, err := tb.b.Cancel(tb.ctx, q, "j"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tb.b.Pause(tb.ctx, "paused", ""); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(3 * time.Hour).UTC().Format(time.RFC3339)
	listed := func() []string {
		t.Helper()
		qs, err := tb.rdb.SMembers(tb.ctx, keyspace.QueuesKey(tb.ns)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(qs)
		return qs
	}
	all := []string{"busy", "idle1", "idle2", "idle3", "paused"}

	for _, args := range [][]string{
		{"queues", "forget", "--idle", "30m"},
		{"queues", "forget", "--idle", "a week"},
		{"queues", "forget", "--idle", "-2h"},
		{"queues", "forget", "idle1", "--idle", "2h"},
		{"queues", "forget"},
	} {
		r := tb.run(t, append(args, "--now", later)...)
		if r.code != 2 || !strings.Contains(r.stderr, "delayq: ") {
			t.Errorf("delayq %v: exit %d (%q), want 2", args, r.code, r.stderr)
		}
		if got := listed(); !slices.Equal(got, all) {
			t.Fatalf("delayq %v changed the queues listed: %v", args, got)
		}
	}
	if r := tb.run(t, "queues", "forget", "--idle", "30m"); !strings.Contains(r.stderr, `invalid --idle "30m": want a duration of at least 1h0m0s`) {
		t.Errorf("a short idle: %q, want the minimum named", r.stderr)
	}
	// Not idle for long enough yet: nothing goes.
	if out := tb.ok(t, "queues", "forget", "--idle", "4h", "--now", later); !strings.Contains(out, "nothing forgotten") {
		t.Errorf("nothing idle for 4h: %q", out)
	}
	if got := listed(); !slices.Equal(got, all) {
		t.Fatalf("queues listed %v after forgetting none", got)
	}
	var res struct {
		IdleMS    int64    `json:"idle_ms"`
		Forgotten []string `json:"forgotten"`
	}
	tb.okJSON(t, &res, "queues", "forget", "--idle", "2h", "--now", later)
	if want := []string{"idle1", "idle2", "idle3"}; res.IdleMS != (2*time.Hour).Milliseconds() || !slices.Equal(res.Forgotten, want) {
		t.Errorf("forget --idle 2h --json: %+v, want %v", res, want)
	}
	if got, want := listed(), []string{"busy", "paused"}; !slices.Equal(got, want) {
		t.Fatalf("queues listed %v, want %v", got, want)
	}
	// Another queue used and left empty: the table names it.
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "k", Queue: "idle4", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "idle4", "k"); err != nil {
		t.Fatal(err)
	}
	if out := tb.ok(t, "queues", "forget", "--idle", "2h", "--now", later); out != "forgot idle queue idle4\n" {
		t.Errorf("forget --idle 2h: %q", out)
	}
	tb.okJSON(t, &res, "queues", "forget", "--idle", "2h", "--now", later)
	if res.Forgotten == nil || len(res.Forgotten) != 0 {
		t.Errorf("forget --idle --json with nothing idle: %+v, want forgotten []", res)
	}

	// A failure (the namespace's record of use is not a hash): exit 1.
	if err := tb.rdb.Set(tb.ctx, keyspace.QueuesSeenKey(tb.ns), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r := tb.run(t, "queues", "forget", "--idle", "2h", "--now", later); r.code != 1 || !strings.Contains(r.stderr, "forget idle queues") {
		t.Errorf("forget --idle with a broken record: exit %d (%q), want 1", r.code, r.stderr)
	}
}

// TestQueuesFairKeys: whether fair turns between keys are on in a queue
// (QueueStats.FairKeys) shows in queues ls (", fair turns" in STATE,
// fair_keys in --json), in stats --json (fair_keys) and in the last line
// of keys ls (and its fair_keys): off before keys fair, on after keys fair
// on, off again after keys fair off; another queue's switch stays off
// throughout.
func TestQueuesFairKeys(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, e := range []*job.Envelope{
		keyedEnv("a0", "imports", "acme"), keyedEnv("a1", "imports", "acme"), keyedEnv("b0", "imports", "beta"),
		{ID: "m0", Queue: "mail", Type: "email.send", Payload: []byte(`{}`)},
	} {
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	type lsOut struct {
		Queues []struct {
			Queue    string `json:"queue"`
			FairKeys *bool  `json:"fair_keys"`
		} `json:"queues"`
	}
	check := func(step string, on bool) {
		t.Helper()
		state, turns := "active ", "off"
		if on {
			state, turns = "active, fair turns", "on"
		}
		out := tb.ok(t, "queues", "ls")
		lines := strings.Split(out, "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "QUEUE    STATE") ||
			!strings.HasPrefix(lines[1], "imports  "+state) || !strings.HasPrefix(lines[2], "mail     active ") || strings.Contains(lines[2], "fair") {
			t.Errorf("%s: queues ls:\n%s", step, out)
		}
		for _, cmd := range [][]string{{"queues", "ls"}, {"stats"}} {
			var ls lsOut
			tb.okJSON(t, &ls, cmd...)
			if len(ls.Queues) != 2 || ls.Queues[0].Queue != "imports" || ls.Queues[0].FairKeys == nil || *ls.Queues[0].FairKeys != on ||
				ls.Queues[1].Queue != "mail" || ls.Queues[1].FairKeys == nil || *ls.Queues[1].FairKeys {
				t.Errorf("%s: %v --json: %+v, want fair_keys %v for imports, false for mail", step, cmd, ls.Queues, on)
			}
		}
		out = tb.ok(t, "keys", "ls", "imports")
		if on {
			if !strings.HasSuffix(out, "; default key cap none, default key rate none, fair turns on\n") {
				t.Errorf("%s: keys ls:\n%s", step, out)
			}
		} else if out != "no key holds jobs back in queue imports, and none is paused\n" {
			t.Errorf("%s: keys ls: %q", step, out)
		}
		var hk heldKeysOut
		tb.okJSON(t, &hk, "keys", "ls", "imports")
		if hk.FairKeys == nil || *hk.FairKeys != on {
			t.Errorf("%s: keys ls --json: fair_keys %v, want %v", step, hk.FairKeys, on)
		}
		if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "imports")); err != nil || st.FairKeys != on {
			t.Fatalf("%s: Stats says FairKeys %v (%v), want %v (fair turns %s)", step, st.FairKeys, err, on, turns)
		}
	}

	check("before keys fair", false)
	tb.ok(t, "keys", "fair", "imports", "on")
	check("after keys fair on", true)
	// On with nothing waiting for a turn: keys ls still says so.
	if ids := tb.claimIDs(t, "imports"); !slices.Equal(ids, []string{"a0", "a1", "b0"}) {
		t.Fatalf("claimed %v, want all three", ids)
	}
	if out := tb.ok(t, "keys", "ls", "imports"); out != "no key holds jobs back in queue imports, and none is paused; default key cap none, default key rate none, fair turns on\n" {
		t.Errorf("keys ls with fair turns on and nothing held: %q", out)
	}
	if err := tb.b.Enqueue(tb.ctx, keyedEnv("a2", "imports", "acme"), keyedEnv("b1", "imports", "beta")); err != nil {
		t.Fatal(err)
	}
	check("on, with jobs waiting for their turn", true)
	if out := tb.ok(t, "keys", "ls", "imports"); !strings.HasSuffix(out, "  turn\n2 keys hold jobs back, 0 paused; default key cap none, default key rate none, fair turns on\n") {
		t.Errorf("keys ls with two keys waiting for their turn:\n%s", out)
	}
	tb.ok(t, "keys", "fair", "imports", "off")
	check("after keys fair off", false)
}
