package dashboard_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/dashserve"
	"github.com/delayq/delayq/job"
)

// hostDo sends a request whose Host header is host, with the bundle's
// cookies, and optional headers.
func (tb *testBundle) hostDo(t *testing.T, host, method, path string, form url.Values, headers ...string) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, tb.srv.URL+tb.prefix+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	// The jar files cookies under the URL's host (127.0.0.1), as a browser
	// that reached the dashboard through a rebound name would send them.
	for _, c := range tb.client.Jar.Cookies(req.URL) {
		req.AddCookie(c)
	}
	client := &http.Client{Transport: ownTransport(t), Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
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

func (tb *testBundle) port() string { return tb.srv.Listener.Addr().String()[len("127.0.0.1:"):] }

// A request whose Host is not loopback nor allowed is refused on every
// route, pages, static files and actions alike, before anything is read
// or written, and without a cookie or a token.
func TestForeignHostRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q1", "j1", "t", `{"secret":"payload"}`, time.Hour)
	tb.kill(t, "q1", "t", `{}`, map[string]string{"d1": "boom"})
	token := tb.csrf(t)
	evil := "evil.example:" + tb.port()
	for _, path := range []string{"/", "/queues/q1", "/queues/q1/job?id=j1", "/dead", "/dead?queue=q1", "/dead/q1/job?id=d1", "/periodic", "/batches", "/batches/b1", "/batches/b1/dead", "/processes", "/static/dashboard.css", "/static/dashboard.js", "/nope"} {
		for _, host := range []string{evil, "evil.example", "EVIL.example:80", "192.0.2.10", "localhost.evil.example", "127.0.0.1.evil.example", "[2001:db8::1]:80", "localhost:bad", "localhost:0", "localhost:99999", "[::1", "[::1]x", "::1"} {
			r := tb.hostDo(t, host, http.MethodGet, path, nil)
			wantStatus(t, "GET "+path+" for host "+host, r, http.StatusMisdirectedRequest)
			mustNotContain(t, "refusal", r.body, "payload", "<table", `name="csrf"`)
			if c := r.header.Get("Set-Cookie"); c != "" {
				t.Fatalf("GET %s for %s sets a cookie: %s", path, host, c)
			}
		}
	}
	actions := map[string]url.Values{
		"/queues/q1/cancel":      {"id": {"j1"}},
		"/queues/q1/reschedule":  {"id": {"j1"}, "in": {"0"}},
		"/queues/q1/pause":       {},
		"/queues/q1/resume":      {},
		"/queues/q1/keys/pause":  {"key": {"acme"}},
		"/queues/q1/keys/resume": {"key": {"acme"}},
		"/queues/q1/keys/fair":   {"on": {"1"}},
		"/dead/q1/redrive":       {"id": {"d1"}},
		"/dead/redrive-all":      {"queue": {"q1"}},
		"/dead/q1/delete":        {"id": {"d1"}},
		"/dead/q1/purge":         {},
	}
	for path, form := range actions {
		form.Set("csrf", token)
		form.Set("confirmed", "yes")
		r := tb.hostDo(t, evil, http.MethodPost, path, form, "Origin", "http://"+evil, "Sec-Fetch-Site", "same-origin")
		wantStatus(t, "POST "+path, r, http.StatusMisdirectedRequest)
	}
	if tb.state(t, "q1", "j1") != job.StateScheduled || tb.state(t, "q1", "d1") != job.StateDead {
		t.Fatal("a refused action changed a job")
	}
	// Loopback names and addresses pass, with and without a port.
	for _, host := range []string{"127.0.0.1:" + tb.port(), "127.0.0.1", "localhost:" + tb.port(), "LOCALHOST", "127.8.9.10:1", "[::1]:" + tb.port(), "[::1]"} {
		wantStatus(t, "GET / for "+host, tb.hostDo(t, host, http.MethodGet, "/", nil), http.StatusOK)
	}
}

// The attack of a web page whose domain an attacker re-points at
// 127.0.0.1 (DNS rebinding): every request names the attacker's host, and
// the browser calls them same-origin. Even with the victim's cookie and a
// token read from a page the victim loaded, nothing is read and nothing
// changes.
func TestRebindingSequenceChangesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q1", "j1", "t", `{"card":"4111"}`, time.Hour)
	tb.kill(t, "q1", "t", `{}`, map[string]string{"d1": "boom", "d2": "boom"})
	origin := "http://evil.example:" + tb.port()
	host := "evil.example:" + tb.port()
	same := []string{"Origin", origin, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}

	// 1. The page reads a job page: refused, so it gets no token or cookie.
	r := tb.hostDo(t, host, http.MethodGet, "/queues/q1/job?id=j1", nil, same...)
	wantStatus(t, "read the job page", r, http.StatusMisdirectedRequest)
	mustNotContain(t, "refusal", r.body, "4111", `name="csrf"`)
	// 2. Give it the best it could hope for: the victim's own session
	// cookie and a token from a page the victim loaded on 127.0.0.1.
	token := tokenIn(t, tb.get(t, "/queues/q1/job?id=j1").body)
	if tb.cookie(t, "delayq_csrf") == "" {
		t.Fatal("no session cookie")
	}
	// 3. Cancel the job, redrive one dead job, purge the rest.
	for path, form := range map[string]url.Values{
		"/queues/q1/cancel": {"id": {"j1"}, "csrf": {token}, "confirmed": {"yes"}},
		"/dead/q1/redrive":  {"id": {"d1"}, "csrf": {token}},
		"/dead/q1/purge":    {"csrf": {token}, "confirmed": {"yes"}},
	} {
		r := tb.hostDo(t, host, http.MethodPost, path, form, same...)
		wantStatus(t, "POST "+path+" from the rebound page", r, http.StatusMisdirectedRequest)
	}
	for id, want := range map[string]job.JobState{"j1": job.StateScheduled, "d1": job.StateDead, "d2": job.StateDead} {
		if got := tb.state(t, "q1", id); got != want {
			t.Errorf("%s is %q after the rebinding attack, want %q", id, got, want)
		}
	}
	// The same token and cookie on the dashboard's own host work: it was
	// the host that was refused.
	r = tb.do(t, http.MethodPost, "/dead/q1/redrive", url.Values{"id": {"d1"}, "csrf": {token}}, "Origin", tb.srv.URL, "Sec-Fetch-Site", "same-origin")
	wantStatus(t, "the victim's own redrive", r, http.StatusSeeOther)
}

func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{AllowedHosts: []string{"ops.example.com", "Admin.Example.com:8443", "[2001:db8::7]", "192.0.2.9"}})
	tb.enqueue(t, "q", "a", "t", `{}`, time.Hour)
	for host, want := range map[string]int{
		"ops.example.com":        http.StatusOK,
		"OPS.example.com:443":    http.StatusOK,
		"ops.example.com:8080":   http.StatusOK,
		"admin.example.com:8443": http.StatusOK,
		"admin.example.com":      http.StatusMisdirectedRequest,
		"admin.example.com:443":  http.StatusMisdirectedRequest,
		"[2001:db8::7]:8080":     http.StatusOK,
		"192.0.2.9":              http.StatusOK,
		"192.0.2.8":              http.StatusMisdirectedRequest,
		"x.ops.example.com":      http.StatusMisdirectedRequest,
		"ops.example.com.evil":   http.StatusMisdirectedRequest,
		"127.0.0.1":              http.StatusOK,
	} {
		wantStatus(t, "host "+host, tb.hostDo(t, host, http.MethodGet, "/queues/q", nil), want)
	}
	// A proxy's name carries actions too, with the token of its pages.
	page := tb.hostDo(t, "ops.example.com", http.MethodGet, "/queues/q/job?id=a", nil)
	wantStatus(t, "job page through the proxy's name", page, http.StatusOK)
	var session string
	for _, c := range (&http.Response{Header: page.header}).Cookies() {
		if c.Name == "delayq_csrf" {
			session = c.Value
		}
	}
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/queues/q/cancel", strings.NewReader(url.Values{"id": {"a"}, "csrf": {tokenIn(t, page.body)}, "confirmed": {"yes"}}.Encode()))
	req.Host = "ops.example.com"
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://ops.example.com")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.AddCookie(&http.Cookie{Name: "delayq_csrf", Value: session})
	res, err := tb.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, res)
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || tb.state(t, "q", "a") != "" {
		t.Fatalf("cancel through the proxy's name: %d, job %q: %s", res.StatusCode, tb.state(t, "q", "a"), body)
	}

	// "*" turns the check off, for an application that checks Host itself.
	open := setup(t, dashboard.Options{AllowedHosts: []string{"*"}})
	wantStatus(t, "any host", open.hostDo(t, "anything.example", http.MethodGet, "/", nil), http.StatusOK)
}

// newSession returns a well-formed session value nobody issued.
func newSession(t *testing.T) string {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// postWith sends a form with exactly the given session cookie (none for
// "") and no jar.
func (tb *testBundle) postWith(t *testing.T, path, session string, form url.Values, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tb.srv.URL+tb.prefix+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if session != "" {
		req.AddCookie(&http.Cookie{Name: "delayq_csrf", Value: session})
	}
	client := &http.Client{Transport: ownTransport(t), Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, body: string(b), header: res.Header}
}

// A cookie and token that something other than the dashboard chose (an
// attacker who can plant cookies for the host) are refused: the token is
// an HMAC of the cookie under a secret.
func TestCSRFSelfMadePairRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom"})
	planted := newSession(t)
	other := setup(t, dashboard.Options{}) // another dashboard: another secret
	other.kill(t, "q", "t", `{}`, map[string]string{"x": "boom"})
	foreignToken := other.csrf(t)
	foreignSession := other.cookie(t, "delayq_csrf")
	for name, c := range map[string]struct{ session, token string }{
		"cookie value as token":            {planted, planted},
		"43 A's twice":                     {strings.Repeat("A", 43), strings.Repeat("A", 43)},
		"pair of another dashboard":        {foreignSession, foreignToken},
		"planted cookie, a foreign token":  {planted, foreignToken},
		"no cookie, a token":               {"", foreignToken},
		"malformed cookie, matching field": {"short", "short"},
	} {
		r := tb.postWith(t, "/dead/q/redrive", c.session, url.Values{"id": {"a"}, "csrf": {c.token}})
		wantStatus(t, name, r, http.StatusForbidden)
		mustContain(t, name, r.body, "CSRF")
	}
	if tb.state(t, "q", "a") != job.StateDead {
		t.Fatal("a refused pair redrove the job")
	}
	// A token is bound to its session: the real token of one session
	// does not go with another cookie.
	token := tb.csrf(t)
	wantStatus(t, "real token, planted cookie", tb.postWith(t, "/dead/q/redrive", planted, url.Values{"id": {"a"}, "csrf": {token}}), http.StatusForbidden)
	// The dashboard's own pair works.
	wantStatus(t, "own pair", tb.postWith(t, "/dead/q/redrive", tb.cookie(t, "delayq_csrf"), url.Values{"id": {"a"}, "csrf": {token}}), http.StatusSeeOther)
}

// TestCSRFPlantedCookieWithAMoreSpecificPath: over plain HTTP something
// else on the host plants delayq_csrf cookies with more specific paths (a
// well-formed value, a malformed one, and one for the exact path of a
// POST), which the browser sends before the dashboard's own on the paths
// they cover. Every action still works, whichever page its form came from
// and wherever it posts; a planted cookie alone still gets nothing.
func TestCSRFPlantedCookieWithAMoreSpecificPath(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom", "b": "boom", "c": "boom", "d": "boom", "e": "boom"})
	for _, id := range []string{"s1", "s2"} {
		tb.enqueue(t, "q", id, "t", `{}`, time.Hour)
	}
	own := tb.csrf(t) // the owner's session cookie is set
	u, err := url.Parse(tb.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	planted := newSession(t)
	tb.client.Jar.SetCookies(u, []*http.Cookie{
		{Name: "delayq_csrf", Value: planted, Path: "/dead/q/"},
		{Name: "delayq_csrf", Value: "not-a-session", Path: "/queues/"},
		{Name: "delayq_csrf", Value: newSession(t), Path: "/dead/q/delete"},
	})
	pageToken := func(path string) string {
		t.Helper()
		r := tb.get(t, path)
		wantStatus(t, "GET "+path, r, http.StatusOK)
		return tokenIn(t, r.body)
	}
	for _, c := range []struct{ page, post, id string }{
		{"/dead", "/dead/q/redrive", "a"},                 // only the owner's cookie on the page; the planted one first on the POST
		{"/dead/q/job?id=b", "/dead/q/redrive", "b"},      // both on both
		{"/dead/q/job?id=c", "/dead/q/delete", "c"},       // a third cookie only on the POST
		{"/dead/q/job?id=e", "/queues/q/cancel", "s1"},    // the page's planted cookie absent from the POST, a malformed one there
		{"/queues/q/job?id=s2", "/queues/q/cancel", "s2"}, // a malformed cookie first on both
	} {
		token := pageToken(c.page)
		r := tb.do(t, http.MethodPost, c.post, url.Values{"id": {c.id}, "csrf": {token}, "confirmed": {"yes"}})
		wantStatus(t, fmt.Sprintf("form of %s posted to %s with planted cookies", c.page, c.post), r, http.StatusSeeOther)
	}
	for id, want := range map[string]job.JobState{"a": job.StateScheduled, "b": job.StateScheduled, "c": "", "e": job.StateDead, "s1": "", "s2": ""} {
		if got := tb.state(t, "q", id); got != want {
			t.Errorf("job %s is %q after its action, want %q", id, got, want)
		}
	}
	// A page under both cookies carries a token for each; the owner's
	// token still does not go with the planted cookie alone.
	both := pageToken("/dead/q/job?id=d")
	if strings.Count(both, ".") != 1 || !strings.Contains(both, own) {
		t.Fatalf("a page under both cookies carries %q, want two tokens, one of them %q", both, own)
	}
	r := tb.postWith(t, "/dead/q/redrive", planted, url.Values{"id": {"d"}, "csrf": {own}})
	wantStatus(t, "the owner's token with only the planted cookie", r, http.StatusForbidden)
	nine := strings.Repeat(own+".", 8) + own
	wantStatus(t, "nine tokens", tb.do(t, http.MethodPost, "/dead/q/redrive", url.Values{"id": {"d"}, "csrf": {nine}}), http.StatusForbidden)
	if got := tb.state(t, "q", "d"); got != job.StateDead {
		t.Fatalf("job d is %q after refused forms, want dead", got)
	}
}

// Replicas that share Options.CSRFSecret accept each other's forms.
func TestCSRFSecretShared(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{7}, 32)
	a := setup(t, dashboard.Options{CSRFSecret: secret})
	a.kill(t, "q", "t", `{}`, map[string]string{"x": "boom"})
	b := &testBundle{ctx: a.ctx, b: a.b, rdb: a.rdb, ns: a.ns}
	d, err := dashboard.New(a.b, dashboard.Options{CSRFSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = newServer(t, d)
	token := a.csrf(t)
	r := b.postWith(t, "/dead/q/redrive", a.cookie(t, "delayq_csrf"), url.Values{"id": {"x"}, "csrf": {token}})
	wantStatus(t, "a form of replica A posted to replica B", r, http.StatusSeeOther)
}

// With credentials, a token is also bound to the credentials it was
// issued under.
func TestCSRFBoundToCredentials(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{BearerToken: "first-token-0123456789", BasicAuthUser: "ops", BasicAuthPassword: "pw-0123456789abcdef"})
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom"})
	page := tb.get(t, "/dead", "Authorization", "Bearer first-token-0123456789")
	wantStatus(t, "dead page", page, http.StatusOK)
	token := tokenIn(t, page.body)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:pw-0123456789abcdef"))
	r := tb.post(t, "/dead/q/redrive", url.Values{"id": {"a"}, "csrf": {token}}, "Authorization", basic)
	wantStatus(t, "token of the bearer session with basic credentials", r, http.StatusForbidden)
	r = tb.post(t, "/dead/q/redrive", url.Values{"id": {"a"}, "csrf": {token}}, "Authorization", "bearer first-token-0123456789")
	wantStatus(t, "token with its own credentials", r, http.StatusSeeOther)
}

// Over TLS the session cookie is Secure and named __Host-, as that prefix
// requires (Path=/, no Domain); a form posted with it works.
func TestCSRFCookieOverTLS(t *testing.T) {
	t.Parallel()
	d := newDashboard(t, dashboard.Options{Prefix: "/ops"})
	cert, pool := selfSigned(t)
	addr, stop := serve(t, "127.0.0.1:0", d, dashserve.Options{TLSConfig: cert})
	t.Cleanup(func() { _ = stop() })
	client := tlsClient(t, pool)
	res, err := client.Get("https://" + addr + "/ops/dead")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var found bool
	for _, c := range res.Cookies() {
		if c.Name == "__Host-delayq_csrf" {
			found = true
			if !c.Secure || c.Path != "/" || c.Domain != "" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Fatalf("cookie %+v: want Secure, HttpOnly, SameSite=Strict, Path=/ and no Domain", c)
			}
		}
		if c.Name == "delayq_csrf" {
			t.Fatalf("over TLS the cookie is still %s", c.Name)
		}
	}
	if !found {
		t.Fatalf("no __Host- cookie: %v", res.Header["Set-Cookie"])
	}
}

// Notices come only from links the dashboard signed after an action: a
// made-up link, or a signed one with another id, shows nothing.
func TestNoticesAreSigned(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	long := strings.Repeat("x", 200)
	tb.kill(t, "q", "t", `{}`, map[string]string{"a": "boom", long: "boom"})
	text := "… rotate tokens at http://evil.example/"
	for _, link := range []string{
		"/?done=deleted&id=" + url.QueryEscape(text),
		"/dead?done=redriven&nid=" + url.QueryEscape(text) + "&t=" + fmt.Sprint(time.Now().Unix()) + "&sig=AAAAAAAAAAAAAAAAAAAAAA",
		"/?done=purged&n=1000000",
	} {
		r := tb.get(t, link)
		wantStatus(t, link, r, http.StatusOK)
		mustNotContain(t, link, r.body, `class="flash"`, "evil.example", "1000000", "Purged")
	}
	r := tb.post(t, "/dead/q/delete", url.Values{"id": {"a"}, "confirmed": {"yes"}})
	wantStatus(t, "delete", r, http.StatusSeeOther)
	loc := r.header.Get("Location")
	wantFlash := `<p class="flash" role="status" dir="auto">Dead job &#34;a&#34; deleted.</p>`
	mustContain(t, "page after delete", tb.get(t, loc).body, wantFlash)
	// The signature covers the id.
	u, _ := url.Parse(loc)
	q := u.Query()
	q.Set("nid", text)
	r = tb.get(t, u.Path+"?"+q.Encode())
	mustNotContain(t, "signed link with another id", r.body, `class="flash"`, "evil.example")
	// An id is shown clipped.
	r = tb.post(t, "/dead/q/redrive", url.Values{"id": {long}})
	wantStatus(t, "redrive long id", r, http.StatusSeeOther)
	body := tb.get(t, r.header.Get("Location")).body
	mustContain(t, "notice of a long id", body, "Job &#34;"+strings.Repeat("x", 80)+"…&#34; sent back")
	mustNotContain(t, "notice of a long id", body, strings.Repeat("x", 81))
}

// Scheme names are case-insensitive (RFC 9110); credentials are not.
func TestAuthSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{BearerToken: "s3cret-0123456789", BasicAuthUser: "ops", BasicAuthPassword: "pw"})
	cred := base64.StdEncoding.EncodeToString([]byte("ops:pw"))
	for h, want := range map[string]int{
		"Bearer s3cret-0123456789":       http.StatusOK,
		"bearer s3cret-0123456789":       http.StatusOK,
		"BEARER s3cret-0123456789":       http.StatusOK,
		"bEaReR  s3cret-0123456789":      http.StatusOK,
		"Bearer S3CRET-0123456789":       http.StatusUnauthorized,
		"Basic " + cred:                  http.StatusOK,
		"basic " + cred:                  http.StatusOK,
		"BASIC " + cred:                  http.StatusOK,
		"basic " + strings.ToLower(cred): http.StatusUnauthorized,
		"Bearer":                         http.StatusUnauthorized,
		"s3cret-0123456789":              http.StatusUnauthorized,
	} {
		wantStatus(t, "Authorization: "+h, tb.get(t, "/", "Authorization", h), want)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Wrong credentials are logged, at most one line a second (a burst of
// guesses gives one line, not one per guess); a request without any, as a
// browser sends before it prompts, is not a failed login.
func TestFailedLoginsLogged(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	logger := zerolog.New(&buf)
	tb := setup(t, dashboard.Options{BearerToken: "s3cret-0123456789", Logger: &logger})
	wantStatus(t, "no credentials", tb.get(t, "/"), http.StatusUnauthorized)
	if buf.String() != "" {
		t.Fatalf("a request without credentials was logged: %s", buf.String())
	}
	start := time.Now()
	for i := range 25 {
		wantStatus(t, "wrong token", tb.get(t, "/", "Authorization", fmt.Sprintf("Bearer guess-%d", i)), http.StatusUnauthorized)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if time.Since(start) < time.Second && len(lines) != 1 {
		t.Fatalf("25 wrong tokens within a second gave %d log lines, want 1:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], `"count":1`) ||
		!strings.Contains(lines[0], "wrong credentials refused") || !strings.Contains(lines[0], `"remote":"127.0.0.1:`) {
		t.Fatalf("log line %s", lines[0])
	}
	if strings.Contains(buf.String(), "guess-") {
		t.Fatal("the log shows a guessed token")
	}
}

// Behind credentials, static files are cacheable only by the browser.
func TestStaticCacheControl(t *testing.T) {
	t.Parallel()
	open := setup(t, dashboard.Options{})
	if cc := open.get(t, "/static/dashboard.css").header.Get("Cache-Control"); !strings.HasPrefix(cc, "public") {
		t.Errorf("without auth: Cache-Control %q", cc)
	}
	locked := setup(t, dashboard.Options{BearerToken: "s3cret-0123456789"})
	r := locked.get(t, "/static/dashboard.css", "Authorization", "Bearer s3cret-0123456789")
	wantStatus(t, "static with auth", r, http.StatusOK)
	if cc := r.header.Get("Cache-Control"); !strings.HasPrefix(cc, "private") {
		t.Errorf("with auth: Cache-Control %q, want private", cc)
	}
	if cc := locked.get(t, "/static/dashboard.css").header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("401: Cache-Control %q, want no-store", cc)
	}
	r = open.hostDo(t, "evil.example", http.MethodGet, "/static/dashboard.css", nil)
	if r.status != http.StatusMisdirectedRequest || r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("421: status %d, Cache-Control %q, want no-store", r.status, r.header.Get("Cache-Control"))
	}
}

// Every test docs/security.md names exists in a test file of the module.
func TestSecurityDocNamesRealTests(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "## Threat model: the dashboard and the CLI") {
		t.Fatal("docs/security.md has no threat model section")
	}
	var src strings.Builder
	err = filepath.WalkDir("..", func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir() && (e.Name() == ".git" || e.Name() == "testdata"):
			return filepath.SkipDir
		case e.IsDir() || !strings.HasSuffix(path, "_test.go"):
			return nil
		}
		b, err := os.ReadFile(path)
		src.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(names) < 40 {
		t.Fatalf("docs/security.md names %d tests", len(names))
	}
	for _, m := range names {
		if !strings.Contains(src.String(), "func "+m[1]+"(") {
			t.Errorf("docs/security.md names %s, which no test file of the module defines", m[1])
		}
	}
}

// bidiRE finds a bidirectional control character.
var bidiRE = regexp.MustCompile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

// isolatedText reports the first text (outside tags) holding a bidi control
// that is not inside a <bdi> or an element with dir="auto".
func unisolated(body string) string {
	tagRE := regexp.MustCompile(`<(/?)([a-zA-Z0-9]+)([^>]*)>`)
	void := map[string]bool{"input": true, "meta": true, "link": true, "br": true, "img": true, "rect": true, "polyline": true, "line": true}
	type open struct {
		name     string
		isolates bool
	}
	var stack []open
	isolated := func() bool {
		for _, o := range stack {
			if o.isolates {
				return true
			}
		}
		return false
	}
	pos := 0
	for _, m := range tagRE.FindAllStringSubmatchIndex(body, -1) {
		if txt := body[pos:m[0]]; bidiRE.MatchString(txt) && !isolated() {
			return txt
		}
		pos = m[1]
		closing, name, attrs := body[m[2]:m[3]] == "/", strings.ToLower(body[m[4]:m[5]]), body[m[6]:m[7]]
		switch {
		case closing:
			for i := len(stack) - 1; i >= 0; i-- {
				if stack[i].name == name {
					stack = stack[:i]
					break
				}
			}
		case !void[name] && !strings.HasSuffix(attrs, "/"):
			stack = append(stack, open{name, name == "bdi" || strings.Contains(attrs, `dir="auto"`)})
		}
	}
	if bidiRE.MatchString(body[pos:]) {
		return body[pos:]
	}
	return ""
}

// Text from jobs (ids, types, errors, headers, payloads) that holds
// right-to-left overrides is isolated, so it cannot reorder the page
// around it; a page title, which cannot hold markup, shows them escaped.
func TestBidiIsolated(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	const rlo = "\u202e"
	id := "inv" + rlo + "fdp.exe"
	err := "refund " + rlo + "00.001$ of"
	env := mustEnvelope("q", id, `{"note":"`+rlo+`gnp.exe"}`)
	env.Headers = map[string]string{"k" + rlo: "v" + rlo}
	env.LastError = err
	if e := tb.b.Enqueue(tb.ctx, env); e != nil {
		t.Fatal(e)
	}
	tb.kill(t, "q", "t", `{"note":"`+rlo+`x"}`, map[string]string{"dead" + rlo + "1": err})
	pages := []string{
		"/queues/q",
		"/queues/q/job?id=" + url.QueryEscape(id),
		"/queues/q?id=" + url.QueryEscape("nope"+rlo),
		"/dead",
		"/dead?queue=q",
		"/dead?queue=q&error=" + url.QueryEscape(rlo),
		"/dead/q/job?id=" + url.QueryEscape("dead"+rlo+"1"),
		"/dead/q/job?id=" + url.QueryEscape("gone"+rlo),
	}
	for _, p := range pages {
		r := tb.get(t, p)
		if !strings.Contains(r.body, rlo) && !strings.Contains(r.body, `\u202e`) {
			t.Fatalf("%s (%d) does not show the text at all:\n%s", p, r.status, r.body)
		}
		if txt := unisolated(r.body); txt != "" {
			t.Errorf("%s: text %q is not isolated", p, txt)
		}
		title := regexp.MustCompile(`<title>([^<]*)</title>`).FindStringSubmatch(r.body)
		if title != nil && strings.Contains(title[1], rlo) {
			t.Errorf("%s: the title holds an override: %q", p, title[1])
		}
	}
	// The confirmation page quotes the id with %q, which escapes it.
	r := tb.post(t, "/dead/q/delete", url.Values{"id": {"dead" + rlo + "1"}})
	if txt := unisolated(r.body); txt != "" {
		t.Errorf("confirmation: text %q is not isolated", txt)
	}
}

// A filtered dead-letter page reads at most DeadMaxScan records; when that
// runs out before the page is full it says so and offers to continue, and
// following the offers finds every match.
func TestDeadFilterScanBudget(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{DeadMaxScan: 10})
	errs := map[string]string{}
	for i := range 25 {
		errs[fmt.Sprintf("j%02d", i)] = "timeout"
	}
	errs["j03"] = "needle in the store"
	tb.kill(t, "q", "t", `{}`, errs)

	cursorRE := regexp.MustCompile(`href="([^"]*cursor=[^"]*)" id="continue-scan"`)
	path := "/dead?queue=q&error=needle"
	var found, partial int
	for range 10 {
		r := tb.get(t, path)
		wantStatus(t, path, r, http.StatusOK)
		found += strings.Count(r.body, `/dead/q/job?id=`)
		m := cursorRE.FindStringSubmatch(r.body)
		if m == nil {
			mustNotContain(t, "last page", r.body, `id="scan-budget"`)
			break
		}
		partial++
		mustContain(t, "partial page", r.body, `id="scan-budget"`, "Scanned 10 dead records", "stops after 10")
		mustNotContain(t, "partial page", r.body, "Older →", "No dead job matches.")
		path = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if found != 1 || partial < 2 {
		t.Fatalf("found the match %d times over %d partial pages, want once over at least 2", found, partial)
	}
	// Without a filter a page is never partial.
	r := tb.get(t, "/dead?queue=q")
	if n := strings.Count(r.body, `/dead/q/job?id=`); n != 25 {
		t.Fatalf("unfiltered page lists %d, want 25", n)
	}
	mustNotContain(t, "unfiltered page", r.body, `id="scan-budget"`)
}

func TestNewRejectsBadSecurityOptions(t *testing.T) {
	t.Parallel()
	rdb, ns := redistestNew(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]dashboard.Options{
		"host with scheme":  {AllowedHosts: []string{"https://ops.example.com"}},
		"host with path":    {AllowedHosts: []string{"ops.example.com/x"}},
		"empty host":        {AllowedHosts: []string{""}},
		"host with space":   {AllowedHosts: []string{"ops example"}},
		"bad port":          {AllowedHosts: []string{"ops.example.com:http"}},
		"bare IPv6":         {AllowedHosts: []string{"2001:db8::1"}},
		"short secret":      {CSRFSecret: []byte("too short")},
		"negative max scan": {DeadMaxScan: -1},
	} {
		if _, err := dashboard.New(b, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
