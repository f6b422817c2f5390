package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

func TestOverview(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	empty := tb.get(t, "/")
	wantStatus(t, "empty overview", empty, http.StatusOK)
	mustContain(t, "empty overview", empty.body, "No queues yet", `id="total-scheduled">0<`)

	for i := range 12 {
		tb.enqueue(t, "mail", fmt.Sprintf("m%d", i), "mail.send", `{"to":"a@example.com"}`, time.Hour)
	}
	for i := range 3 {
		tb.enqueue(t, "mail", fmt.Sprintf("due%d", i), "mail.send", `{}`, 0)
	}
	tb.enqueue(t, "sms", "s1", "sms.send", `{}`, 0)
	tb.enqueue(t, "sms", "s2", "sms.send", `{}`, 0)
	res := tb.claim(t, "sms", 2)
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease); err != nil { // one done, one processing
		t.Fatal(err)
	}
	tb.kill(t, "sms", "sms.send", `{}`, map[string]string{"d1": "boom", "d2": "bang"})

	r := tb.get(t, "/")
	wantStatus(t, "overview", r, http.StatusOK)
	mustContain(t, "overview", r.body,
		`id="total-scheduled">15<`, `id="total-due">3<`, `id="total-processing">1<`, `id="total-dead">2<`,
		`href="/queues/mail"><bdi>mail</bdi></a>`, `href="/queues/sms"><bdi>sms</bdi></a>`,
		`<tr id="queue-mail">`, `data-count="scheduled">15<`, `data-count="due">3<`,
		`<svg class="chart"`, "Jobs handled per minute", "Lateness",
		"3 in the last hour", // one done and two dead
		`data-refresh="5"`, `id="auto-refresh"`,
	)
	// The chart's tooltip of the current minute names the outcomes.
	if !regexp.MustCompile(`<title>\d\d:\d\d — 1 done, 0 failed, 2 dead</title>`).MatchString(r.body) {
		t.Errorf("no tooltip with this minute's outcomes in\n%s", r.body)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy"} {
		if r.header.Get(h) == "" {
			t.Errorf("header %s missing", h)
		}
	}
	if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestStaticFiles(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	for path, want := range map[string]string{
		"/static/dashboard.css": "text/css",
		"/static/dashboard.js":  "text/javascript",
	} {
		r := tb.get(t, path)
		wantStatus(t, path, r, http.StatusOK)
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, want) {
			t.Errorf("%s: Content-Type %q, want %s", path, ct, want)
		}
	}
	wantStatus(t, "missing static file", tb.get(t, "/static/nope.js"), http.StatusNotFound)
	wantStatus(t, "unknown page", tb.get(t, "/nope"), http.StatusNotFound)
}

func TestQueuePage(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	for i := range 60 {
		tb.enqueue(t, "q", fmt.Sprintf("job-%02d", i), "report.build", `{}`, time.Duration(i+1)*time.Minute)
	}
	tb.enqueue(t, "q", "running", "report.build", `{}`, 0)
	tb.claim(t, "q", 1)

	r := tb.get(t, "/queues/q")
	wantStatus(t, "queue page", r, http.StatusOK)
	mustContain(t, "queue page", r.body,
		`id="q-scheduled">60<`, `id="q-processing">1<`,
		`/queues/q/job?id=job-00"`, `/queues/q/job?id=job-49"`, `/queues/q/job?id=running"`,
		"report.build", `id="next-scheduled"`)
	// The lease remaining of the processing job (a 1h lease): "1h00m" when
	// the page is read within the claim's millisecond, "59m5xs" after.
	if !regexp.MustCompile(`>(59m5\ds|1h00m)`).MatchString(r.body) {
		t.Errorf("queue page: no lease remaining of about an hour in\n%s", r.body)
	}
	mustNotContain(t, "first page", r.body, `id=job-50"`)
	next := regexp.MustCompile(`href="\?s=([^&"]+)&amp;p="`).FindStringSubmatch(r.body)
	if next == nil {
		t.Fatal("no link to the next page of scheduled jobs")
	}
	r2 := tb.get(t, "/queues/q?s="+next[1])
	wantStatus(t, "second page", r2, http.StatusOK)
	mustContain(t, "second page", r2.body, `id=job-50"`, `id=job-59"`, "← First page")
	mustNotContain(t, "second page", r2.body, `id=job-49"`, `id="next-scheduled"`)
	// Earlier jobs come first: job-00 is due in 1 minute, job-49 in 50.
	if strings.Index(r.body, `id=job-00"`) > strings.Index(r.body, `id=job-49"`) {
		t.Error("scheduled jobs are not in ready order")
	}

	wantStatus(t, "bad cursor", tb.get(t, "/queues/q?s=!!"), http.StatusBadRequest)
	wantStatus(t, "bad queue", tb.get(t, "/queues/no%20good"), http.StatusBadRequest)
	if r := tb.get(t, "/queues/unknown"); r.status != http.StatusOK || !strings.Contains(r.body, "No job is scheduled") {
		t.Fatalf("unknown queue: %d", r.status)
	}
}

func TestSearchByID(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q", "order/42", "order.cancel", `{}`, time.Hour)
	tb.kill(t, "q", "order.cancel", `{}`, map[string]string{"gone-1": "boom"})

	r := tb.get(t, "/queues/q?id="+url.QueryEscape("order/42"))
	wantStatus(t, "search hit", r, http.StatusSeeOther)
	if loc := r.header.Get("Location"); loc != "/queues/q/job?id=order%2F42" {
		t.Fatalf("search redirects to %q", loc)
	}
	// A dead job is found too, and its detail is the dead record's.
	r = tb.get(t, "/queues/q?id=gone-1")
	wantStatus(t, "search dead", r, http.StatusSeeOther)
	r = tb.get(t, r.header.Get("Location"))
	wantStatus(t, "job page of a dead job", r, http.StatusFound)
	if loc := r.header.Get("Location"); loc != "/dead/q/job?id=gone-1" {
		t.Fatalf("dead job redirects to %q", loc)
	}

	r = tb.get(t, "/queues/q?id=nope")
	wantStatus(t, "search miss", r, http.StatusNotFound)
	mustContain(t, "search miss", r.body, "No job <code><bdi>nope</bdi></code> in queue <code><bdi>q</bdi></code>", `value="nope"`)
	long := strings.Repeat("y", 200)
	r = tb.get(t, "/queues/q?id="+long)
	wantStatus(t, "search miss, long id", r, http.StatusNotFound)
	mustContain(t, "search miss, long id", r.body, "No job <code><bdi>"+strings.Repeat("y", 80)+" …</bdi></code>", `value="`+long+`"`)
	r = tb.get(t, "/queues/q?id="+url.QueryEscape("a{b"))
	wantStatus(t, "bad id", r, http.StatusBadRequest)
	mustContain(t, "bad id", r.body, "may not contain")
}

func TestJobDetail(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q", "a", "invoice.send", `{"invoice":7,"lines":[1,2]}`, time.Hour)
	tb.enqueue(t, "q", "p", "invoice.send", `{}`, 0)
	res := tb.claim(t, "q", 1)
	env := *res.Jobs[0].Envelope
	env.LastError = "smtp: 421 try later"
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, res.Jobs[0].Lease, 2*time.Hour, &env); err != nil {
		t.Fatal(err)
	}
	tb.claim(t, "q", 0)

	r := tb.get(t, "/queues/q/job?id=a")
	wantStatus(t, "scheduled job", r, http.StatusOK)
	mustContain(t, "scheduled job", r.body,
		"invoice.send", `<span class="state s-scheduled">scheduled</span>`,
		"{\n  &#34;invoice&#34;: 7,\n  &#34;lines&#34;: [\n    1,\n    2\n  ]\n}", // indented and escaped
		"of 4 allowed", "Run now", "Cancel job", `action="/queues/q/cancel"`, `action="/queues/q/reschedule"`)

	r = tb.get(t, "/queues/q/job?id=p")
	wantStatus(t, "retried job", r, http.StatusOK)
	mustContain(t, "retried job", r.body, "Last error", "smtp: 421 try later", ">1 of 4 allowed")

	// A job being processed shows its lease, and only the cancel action.
	tb.enqueue(t, "q", "busy", "invoice.send", `{}`, 0)
	tb.claim(t, "q", 1)
	r = tb.get(t, "/queues/q/job?id=busy")
	wantStatus(t, "processing job", r, http.StatusOK)
	mustContain(t, "processing job", r.body, "processing", "left)", "A worker runs this job: it can no longer be rescheduled.", `id="cancel-running"`)
	mustNotContain(t, "processing job", r.body, "Run now", "Reschedule")

	wantStatus(t, "unknown job", tb.get(t, "/queues/q/job?id=nope"), http.StatusNotFound)
	wantStatus(t, "no id", tb.get(t, "/queues/q/job"), http.StatusBadRequest)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q", "a", "t", `{}`, time.Hour)

	// Without confirmation: a confirmation page, nothing changes.
	r := tb.post(t, "/queues/q/cancel", url.Values{"id": {"a"}})
	wantStatus(t, "unconfirmed cancel", r, http.StatusOK)
	mustContain(t, "confirmation page", r.body, "Are you sure?", `name="confirmed" value="yes"`, `name="id" value="a"`, `action="/queues/q/cancel"`)
	if s := tb.state(t, "q", "a"); s != job.StateScheduled {
		t.Fatalf("unconfirmed cancel left the job %q", s)
	}

	r = tb.post(t, "/queues/q/cancel", url.Values{"id": {"a"}, "confirmed": {"yes"}})
	wantStatus(t, "cancel", r, http.StatusSeeOther)
	if s := tb.state(t, "q", "a"); s != "" {
		t.Fatalf("cancelled job is %q", s)
	}
	r = tb.get(t, r.header.Get("Location"))
	wantStatus(t, "page after cancel", r, http.StatusOK)
	mustContain(t, "page after cancel", r.body, `Job &#34;a&#34; cancelled.`)
	mustNotContain(t, "page after cancel", r.body, "No job <code>")

	tb.enqueue(t, "q", "busy", "t", `{}`, 0)
	tb.claim(t, "q", 1)
	mustContain(t, "processing job page", tb.get(t, "/queues/q/job?id=busy").body, `id="cancel-running"`, "Cancel running job")
	r = tb.post(t, "/queues/q/cancel", url.Values{"id": {"busy"}, "confirmed": {"yes"}})
	wantStatus(t, "cancel a processing job", r, http.StatusSeeOther)
	mustContain(t, "page after cancelling a running job", tb.get(t, r.header.Get("Location")).body,
		`Job &#34;busy&#34; cancelled while it ran: its worker was told to stop it`)
	wantStatus(t, "cancel an unknown job", tb.post(t, "/queues/q/cancel", url.Values{"id": {"nope"}, "confirmed": {"yes"}}), http.StatusNotFound)
	wantStatus(t, "cancel in a bad queue", tb.post(t, "/queues/a%20b/cancel", url.Values{"id": {"x"}, "confirmed": {"yes"}}), http.StatusBadRequest)
	wantStatus(t, "cancel by GET", tb.get(t, "/queues/q/cancel?id=a"), http.StatusMethodNotAllowed)
}

func TestReschedule(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q", "a", "t", `{}`, 3*time.Hour)
	ready := func() time.Time {
		j, err := tb.b.Job(tb.ctx, "q", "a")
		if err != nil {
			t.Fatal(err)
		}
		return j.ReadyAt
	}
	around := func(what string, got, want time.Time) {
		t.Helper()
		if d := got.Sub(want); d < -time.Minute || d > time.Minute {
			t.Fatalf("%s: ready at %v, want about %v", what, got, want)
		}
	}

	r := tb.post(t, "/queues/q/reschedule", url.Values{"id": {"a"}, "in": {"0"}})
	wantStatus(t, "run now", r, http.StatusSeeOther)
	around("run now", ready(), time.Now())
	if loc := r.header.Get("Location"); !regexp.MustCompile(`^/queues/q/job\?done=rescheduled&id=a&nid=a&sig=[\w-]{22}&t=\d+$`).MatchString(loc) {
		t.Fatalf("redirect to %q", loc)
	}

	wantStatus(t, "in 2h", tb.post(t, "/queues/q/reschedule", url.Values{"id": {"a"}, "in": {"2h"}}), http.StatusSeeOther)
	around("in 2h", ready(), time.Now().Add(2*time.Hour))

	at := time.Now().Add(5 * time.Hour).UTC().Truncate(time.Second)
	wantStatus(t, "at RFC 3339", tb.post(t, "/queues/q/reschedule", url.Values{"id": {"a"}, "at": {at.Format(time.RFC3339)}}), http.StatusSeeOther)
	if got := ready(); !got.Equal(at) {
		t.Fatalf("at: ready %v, want %v", got, at)
	}
	local := at.Add(time.Hour)
	wantStatus(t, "at datetime-local", tb.post(t, "/queues/q/reschedule", url.Values{"id": {"a"}, "at": {local.Format("2006-01-02T15:04:05")}}), http.StatusSeeOther)
	if got := ready(); !got.Equal(local) {
		t.Fatalf("datetime-local: ready %v, want %v (UTC)", got, local)
	}

	for name, form := range map[string]url.Values{
		"bad delay":      {"id": {"a"}, "in": {"soon"}},
		"negative delay": {"id": {"a"}, "in": {"-1m"}},
		"bad time":       {"id": {"a"}, "at": {"tomorrow"}},
		"both":           {"id": {"a"}, "in": {"1m"}, "at": {at.Format(time.RFC3339)}},
		"bad id":         {"id": {"a{"}, "in": {"1m"}},
	} {
		wantStatus(t, name, tb.post(t, "/queues/q/reschedule", form), http.StatusBadRequest)
		if got := ready(); !got.Equal(local) {
			t.Fatalf("%s moved the job to %v", name, got)
		}
	}
	wantStatus(t, "unknown job", tb.post(t, "/queues/q/reschedule", url.Values{"id": {"nope"}, "in": {"1m"}}), http.StatusNotFound)
}

func TestDeadPage(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "alive", "x", "t", `{}`, time.Hour) // a queue without dead jobs
	tb.kill(t, "mail", "mail.send", `{}`, map[string]string{"m1": "smtp: 550 mailbox unavailable", "m2": "smtp: timeout"})
	tb.kill(t, "mail", "mail.digest", `{}`, map[string]string{"d1": "template: missing field"})
	errs := map[string]string{}
	for i := range 55 {
		errs[fmt.Sprintf("w%02d", i)] = "http 500"
	}
	tb.kill(t, "hooks", "hook.post", `{}`, errs)

	// No queue chosen: every queue, newest first, with a queue column.
	r := tb.get(t, "/dead")
	wantStatus(t, "dead page", r, http.StatusOK)
	mustContain(t, "dead page", r.body, `<option value="" selected>All queues (58)</option>`, `<option value="hooks">hooks (55)</option>`,
		`<option value="mail">mail (3)</option>`, `<option value="alive">alive (0)</option>`, "<th>Queue</th>",
		`name="queue" value=""`)
	mustNotContain(t, "dead page of every queue", r.body, `id="purge"`)
	if n := strings.Count(r.body, `/job?id=`); n != 50 {
		t.Fatalf("first page of every queue lists %d dead jobs, want 50", n)
	}
	// The hooks jobs died last: they come first, the mail ones on the next page.
	if n := strings.Count(r.body, `/dead/hooks/job?id=`); n != 50 {
		t.Fatalf("first page of every queue lists %d jobs of hooks, want 50", n)
	}
	older := regexp.MustCompile(`cursor=([^"&]+)">Older`).FindStringSubmatch(r.body)
	if older == nil {
		t.Fatal("no link to older dead jobs of every queue")
	}
	r = tb.get(t, "/dead?cursor="+older[1])
	mustContain(t, "second page of every queue", r.body, `/dead/mail/job?id=m1"`, `/dead/mail/job?id=d1"`)
	if n := strings.Count(r.body, `/job?id=`); n != 8 {
		t.Fatalf("second page of every queue lists %d dead jobs, want 8", n)
	}

	r = tb.get(t, "/dead?queue=hooks")
	mustContain(t, "dead page of hooks", r.body, `<option value="hooks" selected>hooks (55)</option>`, `id="purge"`)
	mustNotContain(t, "dead page of hooks", r.body, "<th>Queue</th>")
	if n := strings.Count(r.body, `/dead/hooks/job?id=`); n != 50 {
		t.Fatalf("first page lists %d dead jobs, want 50", n)
	}
	older = regexp.MustCompile(`cursor=([^"&]+)">Older`).FindStringSubmatch(r.body)
	if older == nil {
		t.Fatal("no link to older dead jobs")
	}
	r = tb.get(t, "/dead?queue=hooks&cursor="+older[1])
	if n := strings.Count(r.body, `/dead/hooks/job?id=`); n != 5 {
		t.Fatalf("second page lists %d dead jobs, want 5", n)
	}
	wantStatus(t, "bad cursor", tb.get(t, "/dead?queue=hooks&cursor=zzz"), http.StatusBadRequest)
	wantStatus(t, "bad queue", tb.get(t, "/dead?queue=a%20b"), http.StatusBadRequest)

	r = tb.get(t, "/dead?queue=mail&type=mail.send")
	mustContain(t, "type filter", r.body, `id=m1"`, `id=m2"`, `value="mail.send"`)
	mustNotContain(t, "type filter", r.body, `id=d1"`)
	r = tb.get(t, "/dead?queue=mail&error=timeout")
	mustContain(t, "error filter", r.body, `id=m2"`, "smtp: timeout")
	mustNotContain(t, "error filter", r.body, `id=m1"`, `id=d1"`)
	r = tb.get(t, "/dead?queue=mail&type=mail.send&error=nothing+like+this")
	mustContain(t, "no match", r.body, "No dead job matches.")
	r = tb.get(t, "/dead?queue=alive")
	mustContain(t, "queue without dead jobs", r.body, "No dead jobs in this queue.")
}

func TestDeadDetail(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	stack := "panic: nil map\n\ngoroutine 7 [running]:\nmain.handle(...)\n\t/src/main.go:42 +0x1d"
	tb.kill(t, "q", "img.resize", `{"url":"https://example.com/a.png"}`, map[string]string{"x": stack})
	r := tb.get(t, "/dead/q/job?id=x")
	wantStatus(t, "dead detail", r, http.StatusOK)
	mustContain(t, "dead detail", r.body, "img.resize", "goroutine 7 [running]:\nmain.handle(...)\n\t/src/main.go:42 &#43;0x1d",
		"&#34;url&#34;: &#34;https://example.com/a.png&#34;", `id="redrive"`, `id="delete"`, `data-confirm=`)
	wantStatus(t, "unknown dead job", tb.get(t, "/dead/q/job?id=nope"), http.StatusNotFound)
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom"})
	r := tb.post(t, "/dead/q/redrive", url.Values{"id": {"a"}})
	wantStatus(t, "redrive", r, http.StatusSeeOther)
	if s := tb.state(t, "q", "a"); s != job.StateScheduled {
		t.Fatalf("redriven job is %q", s)
	}
	r = tb.get(t, r.header.Get("Location"))
	mustContain(t, "page after redrive", r.body, `Job &#34;a&#34; sent back to its queue.`, "No dead jobs in this queue.")
	wantStatus(t, "redrive again", tb.post(t, "/dead/q/redrive", url.Values{"id": {"a"}}), http.StatusNotFound)
}

func TestRedriveFiltered(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.kill(t, "q", "mail.send", `{}`, map[string]string{"m1": "smtp timeout", "m2": "smtp timeout", "m3": "bad address"})
	tb.kill(t, "q", "sms.send", `{}`, map[string]string{"s1": "smtp timeout"})
	tb.kill(t, "r", "mail.send", `{}`, map[string]string{"r1": "smtp timeout"})
	form := url.Values{"queue": {"q"}, "type": {"mail.send"}, "error": {"timeout"}}
	r := tb.post(t, "/dead/redrive-all", form)
	wantStatus(t, "unconfirmed redrive-all", r, http.StatusOK)
	mustContain(t, "confirmation", r.body, "every dead job that matches the filter of queue &#34;q&#34;",
		`name="queue" value="q"`, `name="type" value="mail.send"`, `name="error" value="timeout"`)
	if s := tb.state(t, "q", "m1"); s != job.StateDead {
		t.Fatalf("unconfirmed redrive-all moved m1 to %q", s)
	}
	form.Set("confirmed", "yes")
	r = tb.post(t, "/dead/redrive-all", form)
	wantStatus(t, "redrive-all", r, http.StatusSeeOther)
	states := func(want map[string]job.JobState) {
		t.Helper()
		for id, w := range want {
			q := "q"
			if id[0] == 'r' {
				q = "r"
			}
			if s := tb.state(t, q, id); s != w {
				t.Errorf("%s is %q, want %q", id, s, w)
			}
		}
	}
	states(map[string]job.JobState{"m1": job.StateScheduled, "m2": job.StateScheduled, "m3": job.StateDead, "s1": job.StateDead, "r1": job.StateDead})
	r = tb.get(t, r.header.Get("Location"))
	mustContain(t, "page after redrive-all", r.body, "Sent 2 dead jobs back to their queue; 0 could not be")

	// Every queue: the filter picks s1 and r1 (m3 does not match).
	r = tb.post(t, "/dead/redrive-all", url.Values{"queue": {""}, "error": {"timeout"}, "confirmed": {"yes"}})
	wantStatus(t, "redrive-all of every queue", r, http.StatusSeeOther)
	states(map[string]job.JobState{"m3": job.StateDead, "s1": job.StateScheduled, "r1": job.StateScheduled})
	wantStatus(t, "bad queue", tb.post(t, "/dead/redrive-all", url.Values{"queue": {"a b"}, "confirmed": {"yes"}}), http.StatusBadRequest)
}

func TestDeleteAndPurge(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom", "b": "boom", "c": "boom"})

	r := tb.post(t, "/dead/q/delete", url.Values{"id": {"a"}})
	wantStatus(t, "unconfirmed delete", r, http.StatusOK)
	mustContain(t, "confirmation", r.body, "Delete dead job &#34;a&#34;")
	if s := tb.state(t, "q", "a"); s != job.StateDead {
		t.Fatalf("unconfirmed delete: a is %q", s)
	}
	wantStatus(t, "delete", tb.post(t, "/dead/q/delete", url.Values{"id": {"a"}, "confirmed": {"yes"}}), http.StatusSeeOther)
	if s := tb.state(t, "q", "a"); s != "" {
		t.Fatalf("deleted job is %q", s)
	}
	wantStatus(t, "delete again", tb.post(t, "/dead/q/delete", url.Values{"id": {"a"}, "confirmed": {"yes"}}), http.StatusNotFound)

	wantStatus(t, "unconfirmed purge", tb.post(t, "/dead/q/purge", nil), http.StatusOK)
	if s := tb.state(t, "q", "b"); s != job.StateDead {
		t.Fatalf("unconfirmed purge: b is %q", s)
	}
	r = tb.post(t, "/dead/q/purge", url.Values{"confirmed": {"yes"}})
	wantStatus(t, "purge", r, http.StatusSeeOther)
	if tb.state(t, "q", "b") != "" || tb.state(t, "q", "c") != "" {
		t.Fatal("purge left dead jobs")
	}
	r = tb.get(t, r.header.Get("Location"))
	mustContain(t, "page after purge", r.body, "Purged 2 dead jobs.")
}

func TestAuth(t *testing.T) {
	t.Parallel()
	bearer := setup(t, dashboard.Options{BearerToken: "s3cret"})
	for _, path := range []string{"/", "/dead", "/queues/q", "/periodic", "/batches", "/batches/b1", "/batches/b1/dead", "/static/dashboard.css"} {
		r := bearer.get(t, path)
		wantStatus(t, "no credentials "+path, r, http.StatusUnauthorized)
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", path)
		}
		mustNotContain(t, "401 body", r.body, "delayq_csrf", "<table")
	}
	wantStatus(t, "wrong token", bearer.get(t, "/", "Authorization", "Bearer nope"), http.StatusUnauthorized)
	wantStatus(t, "token as basic", bearer.get(t, "/", "Authorization", "Basic czNjcmV0"), http.StatusUnauthorized)
	wantStatus(t, "right token", bearer.get(t, "/", "Authorization", "Bearer s3cret"), http.StatusOK)
	r := bearer.do(t, http.MethodPost, "/dead/q/purge", url.Values{"confirmed": {"yes"}})
	wantStatus(t, "POST without credentials", r, http.StatusUnauthorized)

	basic := setup(t, dashboard.Options{BasicAuthUser: "ops", BasicAuthPassword: "pw:with colon"})
	r = basic.get(t, "/")
	wantStatus(t, "basic, no credentials", r, http.StatusUnauthorized)
	if h := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Basic ") {
		t.Fatalf("WWW-Authenticate %q", h)
	}
	req := func(user, pass string) int {
		req, _ := http.NewRequest(http.MethodGet, basic.srv.URL+"/", nil)
		req.SetBasicAuth(user, pass)
		res, err := basic.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := req("ops", "pw:with colon"); got != http.StatusOK {
		t.Fatalf("right basic credentials: %d", got)
	}
	if got := req("ops", "pw"); got != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", got)
	}
	if got := req("root", "pw:with colon"); got != http.StatusUnauthorized {
		t.Fatalf("wrong user: %d", got)
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom"})
	token := tb.csrf(t)
	stillDead := func(what string) {
		t.Helper()
		if s := tb.state(t, "q", "a"); s != job.StateDead {
			t.Fatalf("%s: the job is %q", what, s)
		}
	}
	cases := []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"no token", url.Values{"id": {"a"}, "csrf": {""}}, nil},
		{"wrong token", url.Values{"id": {"a"}, "csrf": {strings.Repeat("A", 43)}}, nil},
		{"cross-site fetch", url.Values{"id": {"a"}, "csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"same-site, other origin", url.Values{"id": {"a"}, "csrf": {token}}, []string{"Sec-Fetch-Site", "same-site"}},
		{"foreign Origin", url.Values{"id": {"a"}, "csrf": {token}}, []string{"Origin", "https://evil.example"}},
	}
	for _, c := range cases {
		r := tb.do(t, http.MethodPost, "/dead/q/redrive", c.form, c.headers...)
		wantStatus(t, c.name, r, http.StatusForbidden)
		mustContain(t, c.name, r.body, "CSRF")
		stillDead(c.name)
	}
	// Without a cookie the token in the form is worthless.
	tb.client.Jar, _ = newJar()
	wantStatus(t, "no cookie", tb.do(t, http.MethodPost, "/dead/q/redrive", url.Values{"id": {"a"}, "csrf": {token}}), http.StatusForbidden)
	stillDead("no cookie")

	r := tb.post(t, "/dead/q/redrive", url.Values{"id": {"a"}}, "Sec-Fetch-Site", "same-origin", "Origin", tb.srv.URL)
	wantStatus(t, "same origin with token", r, http.StatusSeeOther)
}

func TestTrustedOrigin(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{TrustedOrigins: []string{"https://ops.example.com"}})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom"})
	r := tb.post(t, "/dead/q/redrive", url.Values{"id": {"a"}}, "Sec-Fetch-Site", "cross-site", "Origin", "https://ops.example.com")
	wantStatus(t, "trusted origin", r, http.StatusSeeOther)
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{ReadOnly: true})
	tb.enqueue(t, "q", "s", "t", `{}`, time.Hour)
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom"})
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "b1"}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/queues/q", "/queues/q/job?id=s", "/dead?queue=q", "/dead/q/job?id=a", "/periodic", "/batches", "/batches/b1", "/batches/b1/dead", "/processes"} {
		r := tb.get(t, path)
		wantStatus(t, path, r, http.StatusOK)
		mustContain(t, path, r.body, "read-only")
		mustNotContain(t, path, r.body, `method="post"`, "Redrive", "Purge", "Cancel job", "Run now", "Pause queue")
	}
	for _, path := range []string{"/queues/q/cancel", "/queues/q/reschedule", "/queues/q/pause", "/queues/q/resume", "/dead/q/redrive", "/dead/redrive-all", "/dead/q/delete", "/dead/q/purge",
		"/periodic/pause", "/periodic/resume", "/periodic/run", "/queues/q/keys/fair"} {
		r := tb.post(t, path, url.Values{"id": {"a"}, "in": {"0"}, "confirmed": {"yes"}, "name": {"s"}, "on": {"1"}})
		wantStatus(t, path, r, http.StatusForbidden)
		mustContain(t, path, r.body, "read-only")
	}
	if tb.state(t, "q", "a") != job.StateDead || tb.state(t, "q", "s") != job.StateScheduled {
		t.Fatal("a refused action changed a job")
	}
}

// A payload, an error, an id and a header full of markup are shown as text
// on every page that shows them.
func TestEscaping(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	const script = `<script>alert(1)</script>`
	payload := `{"note":"` + script + `"}`
	id := `<img src=x onerror=alert(2)>`
	tb.enqueue(t, "q", id, "t", payload, time.Hour)
	tb.kill(t, "q", "t", payload, map[string]string{"dead-" + id: "boom " + script})
	if err := tb.b.Enqueue(tb.ctx, mustEnvelope("q", "raw", script)); err != nil { // a payload that is not JSON
		t.Fatal(err)
	}
	pages := []string{
		"/queues/q",
		"/queues/q/job?id=" + url.QueryEscape(id),
		"/queues/q/job?id=raw",
		"/queues/q?id=" + url.QueryEscape(script),
		"/dead?queue=q&type=" + url.QueryEscape(script) + "&error=" + url.QueryEscape(script),
		"/dead?queue=q",
		"/dead/q/job?id=" + url.QueryEscape("dead-"+id),
		"/?done=redriven&id=" + url.QueryEscape(script),
	}
	for _, p := range pages {
		r := tb.get(t, p)
		if r.status != http.StatusOK && r.status != http.StatusNotFound {
			t.Fatalf("%s: %d\n%s", p, r.status, r.body)
		}
		mustNotContain(t, p, r.body, "<script>alert", "<img src=x", "alert(1)</script>")
	}
	r := tb.get(t, "/queues/q/job?id="+url.QueryEscape(id))
	mustContain(t, "job page", r.body, "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;")
	r = tb.get(t, "/queues/q/job?id=raw")
	mustContain(t, "raw payload", r.body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	r = tb.get(t, "/dead/q/job?id="+url.QueryEscape("dead-"+id))
	mustContain(t, "dead page", r.body, "boom &lt;script&gt;alert(1)&lt;/script&gt;")
	// The confirmation page repeats the id in a hidden field, escaped.
	r = tb.post(t, "/dead/q/delete", url.Values{"id": {"dead-" + id}})
	mustContain(t, "confirmation", r.body, `value="dead-&lt;img src=x onerror=alert(2)&gt;"`)
	mustNotContain(t, "confirmation", r.body, "<img src=x")
	// A crafted notice link shows only fixed text around the escaped id.
	r = tb.get(t, "/?done=%3Cb%3E")
	mustNotContain(t, "unknown notice", r.body, `class="flash"`)
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{Prefix: "/admin/delayq"})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom"})
	r := tb.get(t, "/")
	wantStatus(t, "overview under prefix", r, http.StatusOK)
	mustContain(t, "overview", r.body, `href="/admin/delayq/static/dashboard.css"`, `href="/admin/delayq/queues/q"`, `href="/admin/delayq/dead"`)
	wantStatus(t, "static under prefix", tb.get(t, "/static/dashboard.js"), http.StatusOK)
	r = tb.get(t, "")
	wantStatus(t, "prefix without slash", r, http.StatusMovedPermanently)
	if loc := r.header.Get("Location"); loc != "/admin/delayq/" {
		t.Fatalf("redirect to %q", loc)
	}
	tb.prefix = ""
	wantStatus(t, "outside the prefix", tb.get(t, "/queues/q"), http.StatusNotFound)
	tb.prefix = "/admin/delayq"
	r = tb.post(t, "/dead/q/redrive", url.Values{"id": {"a"}})
	wantStatus(t, "action under prefix", r, http.StatusSeeOther)
	if loc := r.header.Get("Location"); !strings.HasPrefix(loc, "/admin/delayq/dead?") {
		t.Fatalf("redirect to %q", loc)
	}
	u, _ := url.Parse(tb.srv.URL + "/admin/delayq/")
	for _, c := range tb.client.Jar.Cookies(u) {
		if c.Name == "delayq_csrf" {
			return
		}
	}
	t.Fatal("CSRF cookie not scoped to the prefix")
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	rdb, ns := redistestNew(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]dashboard.Options{
		"prefix without slash":     {Prefix: "admin"},
		"prefix with end slash":    {Prefix: "/admin/"},
		"prefix with a wildcard":   {Prefix: "/admin/{x}"},
		"user without password":    {BasicAuthUser: "ops"},
		"password without user":    {BasicAuthPassword: "pw"},
		"user with colon":          {BasicAuthUser: "a:b", BasicAuthPassword: "pw"},
		"refresh too fast":         {RefreshInterval: time.Millisecond},
		"trusted origin with path": {TrustedOrigins: []string{"https://a.example/path"}},
	} {
		if _, err := dashboard.New(b, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := dashboard.New(nil, dashboard.Options{}); err == nil {
		t.Error("nil broker: no error")
	}
	d, err := dashboard.New(b, dashboard.Options{RefreshInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, d)
	res, err := testClient(t).Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body := readAll(t, res)
	mustContain(t, "refresh off", body, `data-refresh="0"`)
	mustNotContain(t, "refresh off", body, `id="auto-refresh"`)
}
