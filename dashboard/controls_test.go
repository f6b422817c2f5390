package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestCapsAndLimits: the queue page sets and clears a queue's and a type's
// concurrency cap and rate limit, behind the CSRF checks of every action,
// and shows them; a read-only dashboard refuses the same forms; bad values
// and a queue never used are refused and change nothing.
func TestCapsAndLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "sms", "a", "sms.send", `{}`, 0)
	stats := func() job.QueueStats {
		t.Helper()
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "sms"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	r := tb.get(t, "/queues/sms")
	mustContain(t, "queue page", r.body, `id="cap-form"`, `id="limit-form"`, `action="/queues/sms/limit"`)
	mustNotContain(t, "queue page", r.body, `id="limits-note"`, `id="caps-note"`)

	wantStatus(t, "limit without a token", tb.do(t, http.MethodPost, "/queues/sms/limit", url.Values{"count": {"10"}, "per": {"1s"}}), http.StatusForbidden)
	wantStatus(t, "cross-site limit", tb.post(t, "/queues/sms/limit", url.Values{"count": {"10"}, "per": {"1s"}}, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), http.StatusForbidden)
	for _, form := range []url.Values{
		{"count": {"0"}, "per": {"1s"}},
		{"count": {"10"}, "per": {"soon"}},
		{"count": {"10"}, "per": {"0s"}},
		{"count": {"10"}, "per": {"1s"}, "burst": {"-2"}},
		{"count": {"10"}, "per": {"1s"}, "type": {"bad type"}},
	} {
		wantStatus(t, fmt.Sprintf("limit %v", form), tb.post(t, "/queues/sms/limit", form), http.StatusBadRequest)
	}
	wantStatus(t, "cap -1", tb.post(t, "/queues/sms/cap", url.Values{"n": {"-1"}}), http.StatusBadRequest)
	if st := stats(); len(st.RateLimits) != 0 || len(st.Caps) != 0 {
		t.Fatalf("refused forms changed the controls: %+v %+v", st.RateLimits, st.Caps)
	}

	r = tb.post(t, "/queues/sms/limit", url.Values{"count": {"10"}, "per": {"1s"}})
	wantStatus(t, "limit", r, http.StatusSeeOther)
	wantStatus(t, "type limit", tb.post(t, "/queues/sms/limit", url.Values{"type": {"sms.send"}, "count": {"5"}, "per": {"1m"}, "burst": {"3"}}), http.StatusSeeOther)
	wantStatus(t, "cap", tb.post(t, "/queues/sms/cap", url.Values{"n": {"4"}}), http.StatusSeeOther)
	st := stats()
	if st.RateLimits[""] != (job.RateLimit{Count: 10, Per: time.Second, Burst: 1}) || st.RateLimits["sms.send"] != (job.RateLimit{Count: 5, Per: time.Minute, Burst: 3}) || st.Caps[""] != 4 {
		t.Fatalf("stored: limits %+v caps %+v", st.RateLimits, st.Caps)
	}
	r = tb.get(t, r.header.Get("Location")[len(tb.prefix):])
	mustContain(t, "queue page after the limit", r.body, "Rate limit of &#34;sms&#34; set to 10 starts per period", `id="limits-note"`,
		"the queue 10 per 1s;", "type <bdi>sms.send</bdi> 5 per 1m, burst 3;", `id="caps-note"`, "Clear limit of the queue", "Clear cap of the queue")

	wantStatus(t, "clear limit", tb.post(t, "/queues/sms/limit", url.Values{"clear": {"1"}}), http.StatusSeeOther)
	wantStatus(t, "clear cap", tb.post(t, "/queues/sms/cap", url.Values{"n": {"0"}}), http.StatusSeeOther)
	st = stats()
	if _, ok := st.RateLimits[""]; ok || len(st.RateLimits) != 1 || len(st.Caps) != 0 {
		t.Fatalf("after clearing: limits %+v caps %+v", st.RateLimits, st.Caps)
	}

	// A queue never used: 404, and the name stays unknown.
	for _, path := range []string{"/queues/smss/limit", "/queues/smss/cap", "/queues/smss/pause", "/queues/smss/resume"} {
		r := tb.post(t, path, url.Values{"count": {"10"}, "per": {"1s"}, "n": {"2"}})
		wantStatus(t, "POST "+path, r, http.StatusNotFound)
		mustContain(t, "POST "+path, r.body, "nothing was ever enqueued to it")
	}
	if ok, _ := protocol.Admin(tb.b).Known(tb.ctx, "smss"); ok {
		t.Fatal("an action on an unknown queue created it")
	}

	ro := setup(t, dashboard.Options{ReadOnly: true})
	ro.enqueue(t, "sms", "a", "sms.send", `{}`, 0)
	mustNotContain(t, "read-only queue page", ro.get(t, "/queues/sms").body, `id="cap-form"`, `id="limit-form"`)
	wantStatus(t, "read-only limit", ro.do(t, http.MethodPost, "/queues/sms/limit", url.Values{"count": {"10"}, "per": {"1s"}}), http.StatusForbidden)
}

// TestProcessesPage: the processes page lists the live registrations with
// their role, queues and held jobs; the queue page flags jobs processing
// with no live worker serving the queue, and stops once one does.
func TestProcessesPage(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	r := tb.get(t, "/processes")
	wantStatus(t, "processes", r, http.StatusOK)
	mustContain(t, "empty processes page", r.body, "No live process")

	tb.enqueue(t, "orders", "o1", "order.ship", `{}`, 0)
	tb.claim(t, "orders", 1)
	r = tb.get(t, "/queues/orders")
	mustContain(t, "queue page, unserved", r.body, `id="unserved-note"`, "1 jobs are processing and no live worker serves this queue")

	reg, err := fleetreg.New(tb.rdb, tb.ns, fleet.Process{Role: fleet.RoleWorker, Host: "app-7", Version: "v9.9.9",
		Queues: []fleet.Queue{{Name: "orders", Concurrency: 12}}, Types: []string{"order.ship"}},
		fleetreg.Options{TTL: time.Minute, Held: func() []fleet.HeldJob { return []fleet.HeldJob{{Queue: "orders", ID: "o1"}} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Beat(tb.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Deregister(tb.ctx) })
	r = tb.get(t, "/processes")
	mustContain(t, "processes page", r.body, `<tr data-role="worker">`, "<bdi>app-7</bdi>", "<bdi>v9.9.9</bdi>",
		`href="/queues/orders"><bdi>orders</bdi></a>×12`, "<bdi>order.ship</bdi>", `title="orders/o1 ">1</td>`)
	r = tb.get(t, "/queues/orders")
	mustNotContain(t, "queue page, served", r.body, `id="unserved-note"`)
}

// TestHeldBackShown: the queue page and its overview row say how many due
// jobs a rate limit and a cap hold back now, and by which type's control,
// in the flow-control table with a row per type; the due card counts the
// jobs a rate limit holds as due and says so.
func TestHeldBackShown(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	for i := range 5 {
		tb.enqueue(t, "sms", fmt.Sprintf("s%d", i), "sms.send", `{}`, 0)
	}
	for i := range 3 {
		tb.enqueue(t, "sms", fmt.Sprintf("r%d", i), "report.build", `{}`, 0)
	}
	// Before any control: no flow section, nothing held.
	r := tb.get(t, "/queues/sms")
	mustNotContain(t, "queue page without controls", r.body, `id="flow"`, `id="q-held"`)

	if err := tb.b.SetRateLimit(tb.ctx, "sms", "sms.send", job.RateLimit{Count: 2, Per: time.Hour, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "sms", "report.build", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.Pause(tb.ctx, "sms", "mail.send"); err != nil {
		t.Fatal(err)
	}
	claimed := 0
	for range 5 {
		claimed += len(tb.claim(t, "sms", 20).Jobs)
	}
	if claimed != 3 {
		t.Fatalf("claimed %d jobs, want 2 sms (the limit) and 1 report (the cap)", claimed)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "sms"))
	if err != nil || st.HeldByRate["sms.send"] != 3 || st.Held != 2 || st.Due != 3 {
		t.Fatalf("stats %+v, %v: want 3 held by the rate, 2 by the cap, 3 due", st, err)
	}
	r = tb.get(t, "/queues/sms")
	mustContain(t, "queue page", r.body,
		`<span class="count warn" id="held-count">5 held back now</span>`,
		"<li>3 held by the rate limit of sms.send (2 per 1h, burst 2)</li>",
		"<li>2 held by the concurrency cap of report.build (at most 1 running), until one of their type ends</li>",
		`<span class="n" id="q-held">5</span>`,
		`<span class="n" id="q-due">3</span><span class="l">due now, 3 of them held by a rate limit`,
		`<tr data-type="report.build">`, `<tr data-type="sms.send">`, `<tr data-type="mail.send">`,
		"<td>2 per 1h, burst 2</td>", `<td class="r warn">3 by the limit</td>`, `<td class="r warn">2 by the cap</td>`,
		"(not counting the held-back jobs)")
	mustNotContain(t, "queue page", r.body, `<tr data-type="">`)
	r = tb.get(t, "/")
	mustContain(t, "overview", r.body, `data-held="5" title="3 held by the rate limit of sms.send (2 per 1h, burst 2); 2 held by the concurrency cap of report.build (at most 1 running), until one of their type ends">5 held back</span>`)

	// A strict limit of the whole queue shows as a sliding window.
	wantStatus(t, "strict limit", tb.post(t, "/queues/sms/limit", url.Values{"count": {"4"}, "per": {"1m"}, "strict": {"1"}, "slack": {"200ms"}}), http.StatusSeeOther)
	r = tb.get(t, "/queues/sms")
	mustContain(t, "queue page, strict", r.body, `<tr data-type="">`, "<td>4 in any 1m (&#43;200ms slack), strict</td>")
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "sms")); err != nil || st.RateLimits[""] != (job.RateLimit{Count: 4, Per: time.Minute, Strict: true, Slack: 200 * time.Millisecond}) {
		t.Fatalf("stored strict limit: %+v, %v", st.RateLimits, err)
	}
	// A strict limit with a burst, and a slack without strict, are refused
	// with the reason, and change nothing.
	for reason, form := range map[string]url.Values{
		"strict rate limit with burst 3": {"count": {"4"}, "per": {"1m"}, "strict": {"1"}, "burst": {"3"}},
		"slack 1s without Strict":        {"count": {"4"}, "per": {"1m"}, "slack": {"1s"}},
		"slack must be a duration":       {"count": {"4"}, "per": {"1m"}, "strict": {"1"}, "slack": {"-1s"}},
	} {
		r := tb.post(t, "/queues/sms/limit", form)
		wantStatus(t, reason, r, http.StatusBadRequest)
		mustContain(t, reason, r.body, reason)
	}
	if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "sms")); !st.RateLimits[""].Strict || st.RateLimits[""].Count != 4 {
		t.Fatalf("a refused limit changed the stored one: %+v", st.RateLimits)
	}
}

// TestHeldByEachCappedType: with two capped types holding jobs, the queue
// page says how many each holds, in its own line and in its row.
func TestHeldByEachCappedType(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	for i := range 4 {
		tb.enqueue(t, "jobs", fmt.Sprintf("r%d", i), "report.build", `{}`, 0)
	}
	for i := range 3 {
		tb.enqueue(t, "jobs", fmt.Sprintf("m%d", i), "mail.digest", `{}`, 0)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "jobs", "report.build", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "jobs", "mail.digest", 2); err != nil {
		t.Fatal(err)
	}
	if n := len(tb.claim(t, "jobs", 20).Jobs); n != 3 {
		t.Fatalf("claimed %d, want 1 report and 2 digests", n)
	}
	r := tb.get(t, "/queues/jobs")
	mustContain(t, "queue page", r.body,
		`<span class="count warn" id="held-count">4 held back now</span>`,
		"<li>1 held by the concurrency cap of mail.digest (at most 2 running), until one of their type ends</li>",
		"<li>3 held by the concurrency cap of report.build (at most 1 running), until one of their type ends</li>",
		`<td class="r warn">1 by the cap</td>`, `<td class="r warn">3 by the cap</td>`)
}

// TestHeldByKeysShown: jobs a per-key cap holds are said apart from those
// of type caps on the queue page, and counted in its held-back card.
func TestHeldByKeysShown(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	typ := job.New[struct{}]("import.row", job.Queue("imports"))
	for i, key := range []string{"cust-1", "cust-1", "cust-1", "cust-2", "cust-2"} {
		if _, err := typ.Enqueue(tb.ctx, tb.b, struct{}{}, job.ID(fmt.Sprintf("r%d", i)), job.Key(key)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "imports", "", 1); err != nil {
		t.Fatal(err)
	}
	if n := len(tb.claim(t, "imports", 20).Jobs); n != 2 {
		t.Fatalf("claimed %d, want one job of each key", n)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "imports"))
	if err != nil || st.Held != 3 || st.HeldByKey != 3 {
		t.Fatalf("stats %+v, %v; want 3 held by the keys' caps", st, err)
	}
	r := tb.get(t, "/queues/imports")
	mustContain(t, "queue page", r.body,
		`<span class="count warn" id="held-count">3 held back now</span>`,
		"<li>3 held by their keys: a key&#39;s concurrency cap, pause or rate limit, or its wait for a fair turn (see the keys holding jobs back)</li>")
	mustNotContain(t, "queue page", r.body, "held by the concurrency cap of their type")
}

// TestParkedByEachPausedType: with several types paused, the queue page
// says how many jobs each holds parked, in its own line and in its row (a
// paused type holding none shows 0), and the overview's held-back count
// adds them up.
func TestParkedByEachPausedType(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	for i := range 3 {
		tb.enqueue(t, "jobs", fmt.Sprintf("s%d", i), "sms.send", `{}`, 0)
	}
	tb.enqueue(t, "jobs", "m0", "mail.send", `{}`, 0)
	tb.enqueue(t, "jobs", "r0", "report.build", `{}`, 0)
	for _, typ := range []string{"sms.send", "mail.send", "push.send"} {
		if err := tb.b.Pause(tb.ctx, "jobs", typ); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tb.claim(t, "jobs", 20).Jobs); n != 1 {
		t.Fatalf("claimed %d, want the one report", n)
	}
	row := func(typ, held string) string {
		cls := "r"
		if held != "0" {
			cls = "r warn"
		}
		return `<tr data-type="` + typ + `">
  <td>type <bdi>` + typ + `</bdi></td>
  <td><span class="state s-paused">paused</span></td>
  <td class="r">—</td>
  <td>—</td>
  <td class="` + cls + `">` + held + `</td>`
	}
	r := tb.get(t, "/queues/jobs")
	mustContain(t, "queue page", r.body,
		`<span class="count warn" id="held-count">4 held back now</span>`,
		"<li>1 parked while type mail.send is paused</li>", "<li>3 parked while type sms.send is paused</li>",
		row("sms.send", "3 parked"), row("mail.send", "1 parked"), row("push.send", "0"))
	mustNotContain(t, "queue page", r.body, "parked while their type is paused")
	mustContain(t, "overview", tb.get(t, "/").body, `data-held="4" title="1 parked while type mail.send is paused; 3 parked while type sms.send is paused">4 held back</span>`)

	// Resuming one type leaves the other's count.
	if _, err := tb.b.Resume(tb.ctx, "jobs", "sms.send"); err != nil {
		t.Fatal(err)
	}
	r = tb.get(t, "/queues/jobs")
	mustContain(t, "queue page after resuming sms.send", r.body, `<span class="count warn" id="held-count">1 held back now</span>`,
		"<li>1 parked while type mail.send is paused</li>", row("mail.send", "1 parked"))
	mustNotContain(t, "queue page after resuming sms.send", r.body, "parked while type sms.send", `<tr data-type="sms.send">`)
}
