package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// queuesPerPage is how many queues one overview page shows (docs/dashboard.md).
const queuesPerPage = 100

// TestOverviewPaged: with more queues than a page holds, the overview
// shows queuesPerPage of them in name order with links to the other pages,
// says that its counts are the page's, and finds queues by part of their
// name; bad page numbers are refused.
func TestOverviewPaged(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	const n = 250
	names := make([]any, n)
	for i := range names {
		names[i] = fmt.Sprintf("q-%04d", i)
	}
	if err := tb.rdb.SAdd(tb.ctx, keyspace.QueuesKey(tb.ns), names...).Err(); err != nil {
		t.Fatal(err)
	}
	tb.enqueue(t, "q-0150", "a", "t", `{}`, time.Hour)
	r := tb.get(t, "/")
	wantStatus(t, "overview", r, http.StatusOK)
	if rows := strings.Count(r.body, `<tr id="queue-`); rows != queuesPerPage {
		t.Fatalf("page 1 has %d queues, want %d", rows, queuesPerPage)
	}
	mustContain(t, "page 1", r.body, `<tr id="queue-q-0000">`, `<tr id="queue-q-0099">`, "250 queues; page 1 of 3", `href="/?q=&amp;page=2" rel="next"`)
	mustNotContain(t, "page 1", r.body, `<tr id="queue-q-0100">`, `rel="prev"`)

	r = tb.get(t, "/?page=2")
	mustContain(t, "page 2", r.body, `<tr id="queue-q-0100">`, `<tr id="queue-q-0199">`, `id="total-scheduled">1<`, `rel="prev"`, `rel="next"`)
	r = tb.get(t, "/?page=3")
	if rows := strings.Count(r.body, `<tr id="queue-`); rows != 50 {
		t.Fatalf("page 3 has %d queues, want 50", rows)
	}
	mustNotContain(t, "page 3", r.body, `rel="next"`)
	r = tb.get(t, "/?page=9")
	mustContain(t, "page 9", r.body, "No queues on this page.")

	r = tb.get(t, "/?q=Q-015")
	if rows := strings.Count(r.body, `<tr id="queue-`); rows != 10 {
		t.Fatalf("search q-015 found %d queues, want 10", rows)
	}
	mustContain(t, "search", r.body, "10 of 250 queues match <bdi>Q-015</bdi>", `<tr id="queue-q-0150">`)
	r = tb.get(t, "/?q=nothing-like-it")
	mustContain(t, "empty search", r.body, "No queue name contains <bdi>nothing-like-it</bdi>.")
	for _, bad := range []string{"/?page=0", "/?page=x", "/?q=" + strings.Repeat("a", 201)} {
		wantStatus(t, bad, tb.get(t, bad), http.StatusBadRequest)
	}
}

// BenchmarkOverview20000Queues renders the first page of the overview of a
// namespace with 20,000 queues, each holding one scheduled job, on a
// redis-server of its own, and checks the page's size (at most 200 kB). The
// loop measures the handler: SMEMBERS of 20,000 names, the stats and
// history of the page's 100 queues, and the template.
func BenchmarkOverview20000Queues(b *testing.B) {
	const queues = 20_000
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	br, err := broker.New(rdb, broker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	envs := make([]*job.Envelope, 0, 1000)
	for q := range queues {
		envs = append(envs, &job.Envelope{ID: "j", Queue: fmt.Sprintf("tenant-%05d", q), Type: "report.build", Payload: []byte(`{}`), Delay: time.Hour})
		if len(envs) == cap(envs) {
			if err := br.Enqueue(ctx, envs...); err != nil {
				b.Fatal(err)
			}
			envs = envs[:0]
		}
	}
	d, err := dashboard.New(br, dashboard.Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	check := httptest.NewRecorder()
	d.ServeHTTP(check, req)
	if check.Code != http.StatusOK {
		b.Fatalf("overview: %d", check.Code)
	}
	size := check.Body.Len()
	if size > 200_000 {
		b.Fatalf("the overview of 20,000 queues is %d bytes, over 200 kB", size)
	}
	if !strings.Contains(check.Body.String(), "20,000 queues; page 1 of 200") {
		b.Fatal("the overview does not say it is paged")
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		d.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("overview: %d", w.Code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/render")
	b.ReportMetric(float64(size), "bytes/page")
}
