package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type testBundle struct {
	ctx    context.Context
	rdb    redis.UniversalClient
	ns     string
	b      *broker.Broker
	srv    *httptest.Server
	client *http.Client
	prefix string
}

// setup returns a broker on its own namespace and a dashboard over it,
// served by an httptest server; the client keeps cookies and does not
// follow redirects.
func setup(t *testing.T, opts dashboard.Options) *testBundle {
	t.Helper()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{
		Transport:     ownTransport(t),
		Jar:           jar,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	return &testBundle{ctx: context.Background(), rdb: rdb, ns: ns, b: b, srv: srv, client: client, prefix: opts.Prefix}
}

type response struct {
	status int
	body   string
	header http.Header
}

// do sends a request to path (under the prefix) with optional headers.
func (tb *testBundle) do(t *testing.T, method, path string, form url.Values, headers ...string) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, tb.srv.URL+tb.prefix+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := tb.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, body: string(b), header: res.Header}
}

func (tb *testBundle) get(t *testing.T, path string, headers ...string) response {
	t.Helper()
	return tb.do(t, http.MethodGet, path, nil, headers...)
}

// csrfRE finds the CSRF token in a page's forms.
var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf loads the dead-letter page, which sets the session cookie, and
// returns the token its forms carry; "" when it has no forms (read-only, or
// no queue yet).
func (tb *testBundle) csrf(t *testing.T) string {
	t.Helper()
	r := tb.get(t, "/dead")
	if r.status != http.StatusOK {
		t.Fatalf("GET /dead = %d: %s", r.status, r.body)
	}
	if m := csrfRE.FindStringSubmatch(r.body); m != nil {
		return m[1]
	}
	return ""
}

// tokenIn returns the CSRF token of a page.
func tokenIn(t *testing.T, body string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

// cookie returns the value of the client's cookie name for the dashboard.
func (tb *testBundle) cookie(t *testing.T, name string) string {
	t.Helper()
	u, _ := url.Parse(tb.srv.URL + tb.prefix + "/")
	for _, c := range tb.client.Jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// post sends a form with a valid CSRF token (unless form sets one).
func (tb *testBundle) post(t *testing.T, path string, form url.Values, headers ...string) response {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if !form.Has("csrf") {
		form.Set("csrf", tb.csrf(t))
	}
	return tb.do(t, http.MethodPost, path, form, headers...)
}

func (tb *testBundle) enqueue(t *testing.T, queue, id, typ, payload string, delay time.Duration) {
	t.Helper()
	err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: id, Queue: queue, Type: typ, Payload: []byte(payload), MaxRetries: 3, Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
}

// kill enqueues jobs and moves them to the dead-letter store with errors.
func (tb *testBundle) kill(t *testing.T, queue, typ, payload string, errs map[string]string) {
	t.Helper()
	for id := range errs {
		tb.enqueue(t, queue, id, typ, payload, 0)
	}
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, queue, len(errs), time.Minute)
	if err != nil || len(res.Jobs) != len(errs) {
		t.Fatalf("claimed %d of %d: %v", len(res.Jobs), len(errs), err)
	}
	for _, c := range res.Jobs {
		rec := &job.DeadRecord{Type: typ, Body: c.Body, Error: errs[c.ID], Attempts: c.Attempt}
		if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, rec); err != nil {
			t.Fatal(err)
		}
	}
}

// claim leases up to n due jobs of queue for an hour, as a worker would.
func (tb *testBundle) claim(t *testing.T, queue string, n int) protocol.ClaimResult {
	t.Helper()
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, queue, n, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (tb *testBundle) state(t *testing.T, queue, id string) job.JobState {
	t.Helper()
	j, err := tb.b.Job(tb.ctx, queue, id)
	if err != nil {
		return ""
	}
	return j.State
}

func mustContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Errorf("%s does not contain %q", what, s)
		}
	}
}

func mustNotContain(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(body, s) {
			t.Errorf("%s contains %q", what, s)
		}
	}
}

func wantStatus(t *testing.T, what string, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d; body:\n%s", what, r.status, status, r.body)
	}
}

func newJar() (http.CookieJar, error) { return cookiejar.New(nil) }

// ownTransport returns a transport of the test's own. http.DefaultTransport
// is shared by the package's parallel tests, and another test's
// httptest.Server.Close or CloseIdleConnections closes its idle
// connections: a request that was just taking one fails with "http:
// CloseIdleConnections called", and a POST is not retried.
func ownTransport(t testing.TB) *http.Transport {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// testClient is a client on a transport of the test's own (ownTransport).
func testClient(t testing.TB) *http.Client {
	return &http.Client{Transport: ownTransport(t), Timeout: 30 * time.Second}
}

func redistestNew(t *testing.T) (redis.UniversalClient, string) { return redistest.New(t) }

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func readAll(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mustEnvelope is a job of type "t" with a raw payload, due in an hour.
func mustEnvelope(queue, id, payload string) *job.Envelope {
	return &job.Envelope{ID: id, Queue: queue, Type: "t", Payload: []byte(payload), Delay: time.Hour}
}
