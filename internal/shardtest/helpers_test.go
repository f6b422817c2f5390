package shardtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/redistest"
)

// cliOut is one run of the delayq binary.
type cliOut struct {
	Code           int
	Stdout, Stderr string
}

// cli runs delayq with args on the side's namespace and server, with
// --now at the pinned clock in that mode; stdin is its input.
func (e *env) cli(t *testing.T, stdin string, args ...string) cliOut {
	t.Helper()
	args = append(args, "--namespace", e.ns, "--redis-url", redistest.TopologyURL(t, ""))
	if e.mode == pinnedClock {
		args = append(args, "--now", e.pinnedNow().UTC().Format(time.RFC3339Nano))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "REDIS_URL=", "DELAYQ_NAMESPACE=")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	out := cliOut{}
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run delayq %q: %v", args, err)
		}
		out.Code = ee.ExitCode()
	}
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	return out
}

// webPage is one dashboard response.
type webPage struct {
	Status   int
	Location string
	Body     string
}

// csrfSecret is the dashboards' CSRFSecret: the same on both sides, so
// that the signed notices of their redirects are equal.
var csrfSecret = []byte("shardtest-csrf-secret-0123456789abcdef")

// deadMaxScan is the dashboards' DeadMaxScan: small, so that filtered
// dead-letter pages run out of budget and offer to continue.
const deadMaxScan = 20

// web is a dashboard over the env's broker, served on loopback, and a
// client that keeps its session cookie and does not follow redirects.
type web struct {
	srv    *httptest.Server
	client *http.Client
}

// web starts a dashboard over the env's broker, stopped when the test
// ends.
func (e *env) web(t *testing.T) *web {
	t.Helper()
	d, err := dashboard.New(e.b, dashboard.Options{CSRFSecret: csrfSecret, DeadMaxScan: deadMaxScan})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{
		Transport:     &http.Transport{}, // not http.DefaultTransport, which other tests' servers close idle connections of
		Jar:           jar,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	return &web{srv: srv, client: client}
}

func (w *web) do(t *testing.T, method, path string, form url.Values) webPage {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, w.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := w.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return webPage{Status: res.StatusCode, Location: res.Header.Get("Location"), Body: string(b)}
}

// get fetches a page.
func (w *web) get(t *testing.T, path string) webPage {
	t.Helper()
	return w.do(t, http.MethodGet, path, nil)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// post submits a form with the CSRF token of the page at from, as a
// browser that loaded that page would.
func (w *web) post(t *testing.T, from, path string, form url.Values) webPage {
	t.Helper()
	page := w.get(t, from)
	m := csrfRE.FindStringSubmatch(page.Body)
	if m == nil {
		t.Fatalf("GET %s (%d) has no form with a CSRF token:\n%s", from, page.Status, page.Body)
	}
	form.Set("csrf", m[1])
	return w.do(t, http.MethodPost, path, form)
}

// links returns the targets of the links on a page whose text matches
// text, unescaped.
func links(body, text string) []string {
	re := regexp.MustCompile(`<a href="([^"]*)"[^>]*>` + regexp.QuoteMeta(text))
	var out []string
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		out = append(out, strings.ReplaceAll(m[1], "&amp;", "&"))
	}
	return out
}
