package dashboard_test

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/periodic"
)

// The periodic page pauses, resumes and runs a schedule now, behind the
// same CSRF checks as every action; a name that is no schedule, a stale
// schedule and a bad request id are refused and change nothing; a run-now
// form sent twice is one request. Read-only mode shows no button and
// refuses the actions.
func TestPeriodicPauseAndRunNow(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	now := time.Now()
	tb.schedule(t, now, "nightly", "30 2 * * *", false)
	// A stale schedule: its record's expiry passed, and no scheduler
	// heartbeat removed it yet.
	if err := tb.rdb.HSet(tb.ctx, keyspace.Periodic(tb.ns).Schedules, "old-cleanup", `{"spec":"0 4 * * 0","zone":"UTC","expires":1}`).Err(); err != nil {
		t.Fatal(err)
	}
	status := func(sched string) periodic.Status {
		t.Helper()
		list, err := periodic.List(tb.ctx, tb.b, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range list {
			if st.Name == sched {
				return st
			}
		}
		t.Fatalf("no schedule %q", sched)
		return periodic.Status{}
	}

	// post sends a form with the token of the periodic page (the dead
	// letters page, which tb.post reads it from, has no form here).
	post := func(tb *testBundle, path string, form url.Values, headers ...string) response {
		t.Helper()
		form.Set("csrf", tokenIn(t, tb.get(t, "/periodic").body))
		return tb.do(t, http.MethodPost, path, form, headers...)
	}
	r := tb.get(t, "/periodic")
	mustContain(t, "periodic page", r.body, `action="/periodic/pause"`, `<input type="hidden" name="name" value="nightly"><button type="submit" class="small pause-schedule">Pause</button>`,
		`action="/periodic/run"`, `class="small run-schedule">Run now</button>`)
	mustNotContain(t, "periodic page", r.body, `class="small resume-schedule"`, `id="paused-nightly"`)
	// A stale schedule has no run-now button: no scheduler would run it.
	mustNotContain(t, "periodic page", r.body, `name="name" value="old-cleanup"><input type="hidden" name="request"`)

	name := func() url.Values { return url.Values{"name": {"nightly"}} }
	wantStatus(t, "pause without a token", tb.do(t, http.MethodPost, "/periodic/pause", name()), http.StatusForbidden)
	wantStatus(t, "cross-site pause", post(tb, "/periodic/pause", name(), "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), http.StatusForbidden)
	wantStatus(t, "run without a token", tb.do(t, http.MethodPost, "/periodic/run", name()), http.StatusForbidden)
	if st := status("nightly"); st.Paused {
		t.Fatal("a refused pause paused the schedule")
	}
	if n := tb.rdb.HLen(tb.ctx, keyspace.Periodic(tb.ns).Runs).Val(); n != 0 {
		t.Fatalf("a refused run-now recorded %d requests", n)
	}

	r = post(tb, "/periodic/pause", name())
	wantStatus(t, "pause", r, http.StatusSeeOther)
	if st := status("nightly"); !st.Paused {
		t.Fatal("the schedule is not paused")
	}
	r = tb.get(t, r.header.Get("Location"))
	mustContain(t, "periodic page after the pause", r.body, `Schedule &#34;nightly&#34; paused: no scheduler enqueues its ticks until it is resumed.`,
		`<span class="state s-paused" id="paused-nightly">paused</span>`, `class="small resume-schedule">Resume</button>`)
	r = post(tb, "/periodic/resume", name())
	wantStatus(t, "resume", r, http.StatusSeeOther)
	mustContain(t, "periodic page after the resume", tb.get(t, r.header.Get("Location")).body, `Schedule &#34;nightly&#34; resumed`)
	if st := status("nightly"); st.Paused || st.ResumedAt.IsZero() {
		t.Fatalf("after the resume: %+v", st)
	}

	run := url.Values{"name": {"nightly"}, "request": {"form-1"}}
	for range 2 { // the second: the same form sent again
		r = post(tb, "/periodic/run", run)
		wantStatus(t, "run now", r, http.StatusSeeOther)
		mustContain(t, "periodic page after run now", tb.get(t, r.header.Get("Location")).body, `Run now requested as job &#34;nightly@run:form-1&#34;`)
	}
	if got, err := periodic.LookupRun(tb.ctx, tb.b, "nightly", "form-1"); err != nil || got.State != periodic.RunPending {
		t.Errorf("the run-now request: %+v, %v", got, err)
	}
	if n := tb.rdb.HLen(tb.ctx, keyspace.Periodic(tb.ns).Runs).Val(); n != 1 {
		t.Errorf("%d run-now requests recorded, want 1", n)
	}

	pausedBefore := tb.rdb.HGetAll(tb.ctx, keyspace.Periodic(tb.ns).Paused).Val()
	for _, tc := range []struct {
		path string
		form url.Values
		code int
		want string
	}{
		{"/periodic/pause", url.Values{"name": {"nightyl"}}, http.StatusNotFound, `No schedule &#34;nightyl&#34; in this namespace`},
		{"/periodic/resume", url.Values{"name": {"nightyl"}}, http.StatusNotFound, `No schedule &#34;nightyl&#34;`},
		{"/periodic/run", url.Values{"name": {"nightyl"}}, http.StatusNotFound, `No schedule &#34;nightyl&#34;`},
		{"/periodic/pause", url.Values{}, http.StatusBadRequest, `schedule name &#34;&#34; must be 1 to 128 bytes long`},
		{"/periodic/run", url.Values{"name": {"nightly"}, "request": {"a b"}}, http.StatusBadRequest, `run request id &#34;a b&#34; contains`},
		{"/periodic/run", url.Values{"name": {"old-cleanup"}}, http.StatusConflict, `No running scheduler declares schedule &#34;old-cleanup&#34;`},
	} {
		r := post(tb, tc.path, tc.form)
		wantStatus(t, tc.path, r, tc.code)
		mustContain(t, tc.path, r.body, tc.want)
	}
	if after := tb.rdb.HGetAll(tb.ctx, keyspace.Periodic(tb.ns).Paused).Val(); len(after) != len(pausedBefore) {
		t.Errorf("refused actions changed the pauses: %v -> %v", pausedBefore, after)
	}
	if n := tb.rdb.HLen(tb.ctx, keyspace.Periodic(tb.ns).Runs).Val(); n != 1 {
		t.Errorf("refused run-now requests were recorded: %d", n)
	}
	wantStatus(t, "GET of an action", tb.get(t, "/periodic/run"), http.StatusMethodNotAllowed)

	ro := setup(t, dashboard.Options{ReadOnly: true})
	ro.schedule(t, now, "nightly", "30 2 * * *", false)
	mustNotContain(t, "read-only periodic page", ro.get(t, "/periodic").body, `method="post"`, "Run now", "pause-schedule")
	for _, path := range []string{"/periodic/pause", "/periodic/run"} {
		r := ro.post(t, path, url.Values{"name": {"nightly"}})
		wantStatus(t, "read-only "+path, r, http.StatusForbidden)
		mustContain(t, "read-only "+path, r.body, "read-only")
	}
	if _, err := periodic.LookupRun(ro.ctx, ro.b, "nightly", "x"); !errors.Is(err, periodic.ErrUnknownRun) {
		t.Errorf("read-only: %v", err)
	}
	if n := ro.rdb.Exists(ro.ctx, keyspace.Periodic(ro.ns).Paused, keyspace.Periodic(ro.ns).Runs).Val(); n != 0 {
		t.Errorf("read-only actions wrote %d keys", n)
	}
}
