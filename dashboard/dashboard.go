package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
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
	"github.com/delayq/delayq/job"
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

	// TrustedOrigins are origins (scheme://host[:port]) whose cross-origin
	// POSTs are allowed, e.g. a proxy's public origin when it rewrites Host.
	// Same-origin requests never need listing.
	TrustedOrigins []string

	// RefreshInterval is how often the overview and queue pages refresh
	// themselves. 0 means 5s; negative disables auto-refresh.
	RefreshInterval time.Duration

	// Logger receives failed requests. Default zerolog.Nop().
	Logger *zerolog.Logger
}

// DefaultRefreshInterval is the auto-refresh period when
// Options.RefreshInterval is 0.
const DefaultRefreshInterval = 5 * time.Second

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

	// authorization header values admitted, hashed so that comparing them
	// takes the same time whatever the input
	admitted [][32]byte
}

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
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.RefreshInterval > 0 && opts.RefreshInterval < time.Second {
		return nil, fmt.Errorf("dashboard: RefreshInterval %s is below 1s", opts.RefreshInterval)
	}
	d := &Dashboard{b: b, dl: deadletter.New(b), opts: opts, log: zerolog.Nop(), cop: http.NewCrossOriginProtection()}
	if opts.Logger != nil {
		d.log = *opts.Logger
	}
	for _, o := range opts.TrustedOrigins {
		if err := d.cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("dashboard: trusted origin: %w", err)
		}
	}
	if opts.BearerToken != "" {
		d.admitted = append(d.admitted, sha256.Sum256([]byte("Bearer "+opts.BearerToken)))
	}
	if opts.BasicAuthUser != "" {
		cred := base64.StdEncoding.EncodeToString([]byte(opts.BasicAuthUser + ":" + opts.BasicAuthPassword))
		d.admitted = append(d.admitted, sha256.Sum256([]byte("Basic "+cred)))
	}
	var err error
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
	get("/dead", d.dead)
	get("/dead/{queue}/job", d.deadDetail)
	post("/dead/{queue}/redrive", d.redrive)
	post("/dead/redrive-all", d.redriveAll)
	post("/dead/{queue}/delete", d.deleteDead)
	post("/dead/{queue}/purge", d.purge)

	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(p+"/static/", http.FileServerFS(static))
	mux.Handle("GET "+p+"/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
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

// ServeHTTP serves the dashboard.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if !d.authorized(r) {
		switch {
		case d.opts.BasicAuthUser != "":
			h.Set("WWW-Authenticate", `Basic realm="delayq dashboard", charset="UTF-8"`)
		default:
			h.Set("WWW-Authenticate", `Bearer realm="delayq dashboard"`)
		}
		http.Error(w, "401 unauthorized: this dashboard needs credentials", http.StatusUnauthorized)
		return
	}
	d.handler.ServeHTTP(w, r)
}

func (d *Dashboard) authorized(r *http.Request) bool {
	if len(d.admitted) == 0 {
		return true
	}
	got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	ok := 0
	for _, a := range d.admitted {
		ok |= subtle.ConstantTimeCompare(got[:], a[:])
	}
	return ok == 1
}

// csrfCookie holds the token that forms repeat in their csrfField
// (double submit); it is HttpOnly and SameSite=Strict.
const (
	csrfCookie = "delayq_csrf"
	csrfField  = "csrf"
)

// csrfToken returns the request's CSRF token, setting a new cookie when it
// has none.
func (d *Dashboard) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validToken(c.Value) {
		return c.Value
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // never fails on supported platforms
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	http.SetCookie(w, &http.Cookie{
		Name:     csrfCookie,
		Value:    tok,
		Path:     d.opts.Prefix + "/",
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	return tok
}

func validToken(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// maxForm bounds the body of a POST.
const maxForm = 64 << 10

// guardPost admits a state-changing request only when the dashboard is not
// read-only, the browser says it comes from this origin (or it carries no
// browser origin headers, as from curl), and its form repeats the CSRF
// cookie.
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
		if q := r.PathValue("queue"); strings.Contains(r.Pattern, "{queue}") && job.ValidateQueue(q) != nil {
			d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Bad queue name %q.", q))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			d.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		c, err := r.Cookie(csrfCookie)
		form := r.PostForm.Get(csrfField)
		if err != nil || !validToken(c.Value) || subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
			d.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or stale: reload the page and try again.")
			return
		}
		h(w, r)
	})
}
