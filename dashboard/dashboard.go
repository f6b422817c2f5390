package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/naming"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a Dashboard. The zero value serves everything at the
// root, without authentication, with actions enabled.
type Options struct {
	// Prefix is the path the handler is mounted at, e.g. "/admin/delayq"
	// (no trailing slash): every route and link is under it, and requests
	// outside it get 404. "" means the root. Mount the handler at
	// Prefix+"/" in your mux.
	Prefix string

	// ReadOnly hides every action and refuses every POST with 403.
	ReadOnly bool

	// BearerToken, when set, admits requests whose Authorization header is
	// "Bearer <token>".
	BearerToken string
	// BasicAuthUser and BasicAuthPassword, when set (both or neither),
	// admit requests with that HTTP basic authentication; browsers prompt
	// for it. With neither BearerToken nor basic auth set, every request is
	// admitted: keep the listener on loopback then.
	BasicAuthUser, BasicAuthPassword string

	// AllowedHosts are the host names (or addresses) besides loopback ones
	// that requests may name in their Host header, e.g. the public name of
	// a reverse proxy in front of the dashboard: "ops.example.com" admits
	// it on any port, "ops.example.com:8443" on that port only. Requests
	// for any other host get 421 Misdirected Request on every route, so a
	// web page on a domain pointed at 127.0.0.1 (DNS rebinding) can neither
	// read the dashboard nor act on it. localhost, 127.0.0.0/8 and ::1 are
	// always allowed. "*" admits every host: only for an application that
	// checks Host itself before the dashboard sees the request.
	AllowedHosts []string

	// TrustedOrigins are origins (scheme://host[:port]) whose cross-origin
	// POSTs are allowed, e.g. a proxy's public origin when it rewrites Host.
	// Same-origin requests never need listing.
	TrustedOrigins []string

	// CSRFSecret is the key (at least 32 bytes) of the HMAC that ties the
	// forms' CSRF tokens to the session cookie, and that signs the notices
	// shown after an action. nil means 32 random bytes per New, which is
	// right for one process; give every replica behind one address the
	// same secret so that a form served by one is accepted by another.
	CSRFSecret []byte

	// DeadMaxScan bounds the dead records one page of a filtered dead-letter
	// list reads (see deadletter.ListOptions.MaxScan); when it runs out the
	// page offers to continue scanning. 0 means 10,000,
	// deadletter's default.
	DeadMaxScan int

	// RefreshInterval is how often the overview and queue pages refresh
	// themselves. 0 means 5s; negative disables auto-refresh.
	RefreshInterval time.Duration

	// Logger receives failed requests. Default zerolog.Nop().
	Logger *zerolog.Logger
}

// defaultRefreshInterval is the auto-refresh period when
// Options.RefreshInterval is 0.
const defaultRefreshInterval = 5 * time.Second

// Dashboard is an http.Handler that serves the web UI of one broker's
// namespace. Build one with New.
type Dashboard struct {
	b       *broker.Broker
	dl      *deadletter.Inspector
	opts    Options
	log     zerolog.Logger
	cop     *http.CrossOriginProtection
	pages   map[string]*template.Template
	handler http.Handler

	// authorization header values admitted (scheme lower-cased), hashed so
	// that comparing them takes the same time whatever the input
	admitted [][32]byte

	hosts         []hostRule // Options.AllowedHosts
	anyHost       bool       // AllowedHosts holds "*"
	secret        []byte     // CSRFSecret, or random
	refusedLogins rateLimited
	refusedHosts  rateLimited
}

// minCSRFSecret is the shortest Options.CSRFSecret New accepts.
const minCSRFSecret = 32

var _ http.Handler = (*Dashboard)(nil)

// New returns a Dashboard over b. It checks the options but does not
// contact Redis.
func New(b *broker.Broker, opts Options) (*Dashboard, error) {
	if b == nil {
		return nil, errors.New("dashboard: nil broker")
	}
	if err := validatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if (opts.BasicAuthUser == "") != (opts.BasicAuthPassword == "") {
		return nil, errors.New("dashboard: BasicAuthUser and BasicAuthPassword must be set together")
	}
	if strings.Contains(opts.BasicAuthUser, ":") {
		return nil, errors.New("dashboard: BasicAuthUser must not contain ':'")
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = defaultRefreshInterval
	}
	if opts.RefreshInterval > 0 && opts.RefreshInterval < time.Second {
		return nil, fmt.Errorf("dashboard: RefreshInterval %s is below 1s", opts.RefreshInterval)
	}
	d := &Dashboard{b: b, dl: deadletter.New(b), opts: opts, log: zerolog.Nop(), cop: http.NewCrossOriginProtection()}
	if opts.Logger != nil {
		d.log = *opts.Logger
	}
	if opts.CSRFSecret != nil && len(opts.CSRFSecret) < minCSRFSecret {
		return nil, fmt.Errorf("dashboard: CSRFSecret is %d bytes; it needs at least %d random bytes", len(opts.CSRFSecret), minCSRFSecret)
	}
	if opts.DeadMaxScan < 0 {
		return nil, fmt.Errorf("dashboard: DeadMaxScan %d is negative; 0 means the default", opts.DeadMaxScan)
	}
	var err error
	if d.hosts, d.anyHost, err = parseAllowedHosts(opts.AllowedHosts); err != nil {
		return nil, err
	}
	d.secret = append([]byte(nil), opts.CSRFSecret...)
	if len(d.secret) == 0 {
		d.secret = make([]byte, 32)
		_, _ = rand.Read(d.secret) // never fails on supported platforms
	}
	for _, o := range opts.TrustedOrigins {
		if err := d.cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("dashboard: trusted origin: %w", err)
		}
	}
	if opts.BearerToken != "" {
		d.admitted = append(d.admitted, sha256.Sum256([]byte("bearer "+opts.BearerToken)))
	}
	if opts.BasicAuthUser != "" {
		cred := base64.StdEncoding.EncodeToString([]byte(opts.BasicAuthUser + ":" + opts.BasicAuthPassword))
		d.admitted = append(d.admitted, sha256.Sum256([]byte("basic "+cred)))
	}
	if d.pages, err = parsePages(); err != nil {
		return nil, err
	}
	d.handler = d.routes()
	return d, nil
}

func validatePrefix(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return fmt.Errorf("dashboard: Prefix %q must start with '/' and not end with '/'", p)
	}
	for _, r := range p {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("/._~-", r):
		default:
			return fmt.Errorf("dashboard: Prefix %q contains %q; allowed are letters, digits and '/._~-'", p, r)
		}
	}
	return nil
}

// routes builds the mux. POST routes pass auth, the read-only check and
// both CSRF checks before their handler runs.
func (d *Dashboard) routes() http.Handler {
	p := d.opts.Prefix
	mux := http.NewServeMux()
	get := func(path string, h http.HandlerFunc) { mux.HandleFunc("GET "+p+path, h) }
	post := func(path string, h http.HandlerFunc) {
		mux.Handle("POST "+p+path, d.guardPost(h))
		mux.HandleFunc(p+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			d.fail(w, r, http.StatusMethodNotAllowed, "This address takes a POST from the dashboard's forms.")
		})
	}

	get("/{$}", d.overview)
	get("/queues/{queue}", d.queue)
	get("/queues/{queue}/job", d.jobDetail)
	post("/queues/{queue}/cancel", d.cancel)
	post("/queues/{queue}/reschedule", d.reschedule)
	post("/queues/{queue}/pause", d.pause)
	post("/queues/{queue}/resume", d.resume)
	post("/queues/{queue}/keys/pause", d.pauseKey)
	post("/queues/{queue}/keys/resume", d.resumeKey)
	post("/queues/{queue}/keys/cap", d.setKeyCap)
	post("/queues/{queue}/keys/limit", d.setKeyLimit)
	post("/queues/{queue}/keys/fair", d.setKeyFair)
	post("/queues/{queue}/cap", d.setCap)
	post("/queues/{queue}/limit", d.setLimit)
	get("/processes", d.processes)
	get("/dead", d.dead)
	get("/dead/{queue}/job", d.deadDetail)
	post("/dead/{queue}/redrive", d.redrive)
	post("/dead/redrive-all", d.redriveAll)
	post("/dead/{queue}/delete", d.deleteDead)
	post("/dead/{queue}/purge", d.purge)
	get("/periodic", d.periodic)
	post("/periodic/pause", d.pauseSchedule)
	post("/periodic/resume", d.resumeSchedule)
	post("/periodic/run", d.runSchedule)
	get("/batches", d.batches)
	get("/batches/{id}", d.batch)
	get("/batches/{id}/dead", d.batchDead)

	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(p+"/static/", http.FileServerFS(static))
	cache := "public, max-age=3600"
	if len(d.admitted) > 0 {
		cache = "private, max-age=3600" // behind credentials: no shared cache keeps a copy
	}
	mux.Handle("GET "+p+"/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", cache)
		files.ServeHTTP(w, r)
	}))
	if p != "" {
		mux.Handle("GET "+p, http.RedirectHandler(p+"/", http.StatusMovedPermanently))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "There is no page at this address.")
	})
	return mux
}

// hsts is the Strict-Transport-Security header of an answer over TLS: a
// browser that saw it uses only HTTPS for the host for a year, so that a
// later link or typed address over plain HTTP cannot expose credentials
// or cookies. It has no includeSubDomains: the dashboard speaks only for
// its own host name.
const hsts = "max-age=31536000"

// ServeHTTP serves the dashboard. Every request first passes the Host
// check (421 otherwise) and then the credentials check (401 otherwise).
// Answers over TLS for a host that is not a loopback name or address
// carry Strict-Transport-Security (hsts). Loopback names get none: the
// browser would apply it to every port of localhost, to other programs'
// plain-HTTP pages too, and it ignores it for IP addresses anyway.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if !d.hostAllowed(r) {
		d.refusedHosts.note(d, r, "dashboard: request for a host not allowed refused")
		h.Set("Cache-Control", "no-store")
		http.Error(w, "421 misdirected request: this dashboard does not answer to that host name; "+
			"open it on localhost or 127.0.0.1, or allow the name (Options.AllowedHosts, delayq dashboard --allowed-host)", http.StatusMisdirectedRequest)
		return
	}
	if r.TLS != nil {
		if host, _, _ := splitHost(r.Host); !isLoopback(host) {
			h.Set("Strict-Transport-Security", hsts)
		}
	}
	identity, ok := d.admit(r)
	if !ok {
		switch {
		case d.opts.BasicAuthUser != "":
			h.Set("WWW-Authenticate", `Basic realm="delayq dashboard", charset="UTF-8"`)
		default:
			h.Set("WWW-Authenticate", `Bearer realm="delayq dashboard"`)
		}
		h.Set("Cache-Control", "no-store")
		http.Error(w, "401 unauthorized: this dashboard needs credentials", http.StatusUnauthorized)
		return
	}
	if identity != nil {
		r = r.WithContext(context.WithValue(r.Context(), identityKey{}, identity))
	}
	d.handler.ServeHTTP(w, r)
}

// maxForm bounds the body of a POST.
const maxForm = 64 << 10

// guardPost admits a state-changing request only when the dashboard is not
// read-only, the browser says it comes from this origin (or it carries no
// browser origin headers, as from curl), and its form carries the CSRF
// token of its session cookie.
func (d *Dashboard) guardPost(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.opts.ReadOnly {
			d.fail(w, r, http.StatusForbidden, "This dashboard is read-only: actions are disabled.")
			return
		}
		if err := d.cop.Check(r); err != nil {
			d.fail(w, r, http.StatusForbidden, "This cross-origin request was refused (CSRF protection).")
			return
		}
		if q := r.PathValue("queue"); strings.Contains(r.Pattern, "{queue}") && naming.Queue(q) != nil {
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Bad queue name %q.", q))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			d.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		if !d.checkCSRF(r) {
			d.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or stale: reload the page and try again.")
			return
		}
		h(w, r)
	})
}
