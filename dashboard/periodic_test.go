package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/fixture"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
)

type reportArgs struct {
	Kind string `json:"kind"`
}

var reportType = job.New[reportArgs]("report.build", job.Queue("reports"))

// schedule syncs one schedule from a scheduler whose clock starts at at,
// until it is stored (with a last run, when ticked).
func (tb *testBundle) schedule(t *testing.T, at time.Time, name, spec string, ticked bool) {
	t.Helper()
	fixture.RunScheduler(t, tb.b, at, func(s *periodic.Scheduler) error {
		return periodic.Add(s, name, spec, reportType, reportArgs{Kind: name})
	}, func(list []periodic.Status) bool {
		st := fixture.Find(list, name)
		return st != nil && (!ticked || !st.Last.IsZero())
	})
}

// The periodic page lists each schedule with its expression, zone, next
// and last run (linked to the tick's job), last outcome (its error as
// text) and whether it is stale.
func TestPeriodicPage(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	r := tb.get(t, "/periodic")
	wantStatus(t, "empty periodic page", r, http.StatusOK)
	mustContain(t, "empty periodic page", r.body, "No periodic schedules")

	now := time.Now()
	tb.schedule(t, now.Add(-5*time.Minute-30*time.Second), "old-cleanup", "0 4 * * 0", false)
	tb.schedule(t, now.Add(-55*time.Second), "every-second", "@every 1s", true)
	list, err := periodic.List(tb.ctx, tb.b, time.Time{})
	if err != nil || len(list) != 2 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	m := fixture.TickMessage(t, tb.b, "reports", list[0].LastID, 2, time.Time{})
	_ = periodic.Outcomes(tb.b)(job.HandlerFunc(func(context.Context, *job.Message) error {
		return errors.New(`<script>alert(1)</script> upstream down`)
	})).Handle(tb.ctx, m)

	r = tb.get(t, "/periodic")
	wantStatus(t, "periodic page", r, http.StatusOK)
	mustContain(t, "periodic page", r.body,
		`aria-current="page">Periodic</a>`,
		"<bdi>every-second</bdi>", "<code>@every 1s</code>", "<td>UTC</td>", "<bdi>report.build</bdi>",
		`href="/queues/reports/job?id=every-second%40`+strings.ReplaceAll(list[0].Last.UTC().Format(time.RFC3339), ":", "%3a")+`"`,
		`<span class="outcome o-failed">failed</span>`, "&lt;script&gt;alert(1)&lt;/script&gt; upstream down",
		`<span class="state s-live">live</span>`,
		"<bdi>old-cleanup</bdi>", "<code>0 4 * * 0</code>", `<tr class="stale">`, `<span class="state s-stale">stale</span> <span title=`)
	mustNotContain(t, "periodic page", r.body, "<script>alert(1)")
	if list[1].Name != "old-cleanup" || !list[1].Stale {
		t.Errorf("old-cleanup: %+v, want stale", list[1])
	}
	r = tb.get(t, "/")
	mustContain(t, "overview", r.body, `href="/periodic"`)
}
