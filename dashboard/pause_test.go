package dashboard_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/testkit"
)

// The queue page pauses and resumes a queue and a job type of it, behind
// the same CSRF checks as every action; the queue page and the overview
// show the pause.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q", "a", "email.send", `{}`, 0)
	tb.enqueue(t, "q", "b", "email.digest", `{}`, 0)
	paused := func() (bool, []string, int64) {
		t.Helper()
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
		if err != nil {
			t.Fatal(err)
		}
		return st.Paused, st.PausedTypes, st.Parked
	}

	r := tb.get(t, "/queues/q")
	mustContain(t, "queue page", r.body, `action="/queues/q/pause"`, `id="pause-queue"`, `id="pause-type"`)
	mustNotContain(t, "queue page", r.body, `id="paused-badge"`, `id="resume-queue"`)

	// Without a token, or cross-site: refused, nothing paused.
	wantStatus(t, "pause without a token", tb.do(t, http.MethodPost, "/queues/q/pause", url.Values{}), http.StatusForbidden)
	wantStatus(t, "cross-site pause", tb.post(t, "/queues/q/pause", nil, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), http.StatusForbidden)
	if p, _, _ := paused(); p {
		t.Fatal("a refused pause paused the queue")
	}

	r = tb.post(t, "/queues/q/pause", nil)
	wantStatus(t, "pause", r, http.StatusSeeOther)
	if p, _, _ := paused(); !p {
		t.Fatal("the queue is not paused")
	}
	r = tb.get(t, r.header.Get("Location"))
	mustContain(t, "queue page after the pause", r.body, `Queue &#34;q&#34; paused: no worker claims its jobs until it is resumed.`,
		`<span class="state s-paused" id="paused-badge">paused</span>`, `id="resume-queue"`, `id="paused-note"`)
	if res := tb.claim(t, "q", 10); len(res.Jobs) != 0 {
		t.Fatalf("claimed %d jobs from the paused queue", len(res.Jobs))
	}
	mustContain(t, "overview", tb.get(t, "/").body, `<bdi>q</bdi></a> <span class="state s-paused">paused</span>`)
	r = tb.post(t, "/queues/q/resume", nil)
	wantStatus(t, "resume", r, http.StatusSeeOther)
	mustContain(t, "queue page after the resume", tb.get(t, r.header.Get("Location")).body, `Queue &#34;q&#34; resumed.`, `id="pause-queue"`)
	if p, _, _ := paused(); p {
		t.Fatal("the queue is still paused")
	}

	// One type: its due job is parked at the claim; resuming brings it back.
	r = tb.post(t, "/queues/q/pause", url.Values{"type": {"email.send"}})
	wantStatus(t, "pause a type", r, http.StatusSeeOther)
	if res := tb.claim(t, "q", 10); len(res.Jobs) != 1 || res.Jobs[0].ID != "b" {
		t.Fatalf("claimed %+v with email.send paused, want b", res.Jobs)
	}
	r = tb.get(t, "/queues/q")
	mustContain(t, "queue page with a type paused", r.body, `type <bdi>email.send</bdi> paused`, "1 due jobs of paused types are parked.",
		`<input type="hidden" name="type" value="email.send"><button type="submit" class="small">Resume <bdi>email.send</bdi></button>`)
	mustContain(t, "overview", tb.get(t, "/").body, `<span class="state s-paused">types paused</span>`)
	r = tb.post(t, "/queues/q/resume", url.Values{"type": {"email.send"}})
	wantStatus(t, "resume a type", r, http.StatusSeeOther)
	mustContain(t, "after resuming the type", tb.get(t, r.header.Get("Location")).body, `Job type &#34;email.send&#34; resumed: 1 parked jobs back on the schedule.`)
	if _, types, parked := paused(); len(types) != 0 || parked != 0 {
		t.Fatalf("after the resume: types %v, parked %d", types, parked)
	}
	wantStatus(t, "a bad type", tb.post(t, "/queues/q/pause", url.Values{"type": {"no spaces"}}), http.StatusBadRequest)
	wantStatus(t, "GET of an action", tb.get(t, "/queues/q/pause"), http.StatusMethodNotAllowed)
}

// The queue page shows the queue's concurrency caps and how many due jobs
// wait for a slot.
func TestCapsShown(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q", "a", "report.build", `{}`, 0)
	tb.enqueue(t, "q", "b", "report.build", `{}`, 0)
	mustNotContain(t, "queue page without caps", tb.get(t, "/queues/q").body, `id="caps-note"`)
	if err := tb.b.SetConcurrency(tb.ctx, "q", "report.build", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "", 3); err != nil {
		t.Fatal(err)
	}
	if res := tb.claim(t, "q", 10); len(res.Jobs) != 1 {
		t.Fatalf("claimed %d under a type cap of 1", len(res.Jobs))
	}
	mustContain(t, "queue page with caps", tb.get(t, "/queues/q").body,
		`Concurrency caps across all workers: the queue at most 3 running; type <bdi>report.build</bdi> at most 1 running; 1 due jobs held until their type has a free slot.`)
}
