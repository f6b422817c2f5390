package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/fleet"
)

// TestCapsAndLimits: the queue page sets and clears a queue's and a type's
// concurrency cap and rate limit, behind the CSRF checks of every action,
// and shows them; a read-only dashboard refuses the same forms; bad values
// and a queue never used are refused and change nothing.
func TestCapsAndLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "sms", "a", "sms.send", `{}`, 0)
	stats := func() broker.QueueStats {
		t.Helper()
		st, err := tb.b.Stats(tb.ctx, "sms")
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
	if st.RateLimits[""] != (broker.RateLimit{Count: 10, Per: time.Second, Burst: 1}) || st.RateLimits["sms.send"] != (broker.RateLimit{Count: 5, Per: time.Minute, Burst: 3}) || st.Caps[""] != 4 {
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
	if ok, _ := tb.b.Known(tb.ctx, "smss"); ok {
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

	reg, err := fleet.New(tb.rdb, tb.ns, fleet.Process{Role: fleet.RoleWorker, Host: "app-7", Version: "v9.9.9",
		Queues: []fleet.Queue{{Name: "orders", Concurrency: 12}}, Types: []string{"order.ship"}},
		fleet.Options{TTL: time.Minute, Held: func() []fleet.HeldJob { return []fleet.HeldJob{{Queue: "orders", ID: "o1"}} }})
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
