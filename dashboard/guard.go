package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/dashserve"
)

// This file holds the checks every request passes: the Host it names, its
// credentials, and for a POST its CSRF token; and the signature of the
// notices shown after an action.

// hostRule is one entry of Options.AllowedHosts: a host name or IP
// address, lower case, and a port ("" for any).
type hostRule struct{ host, port string }

// parseAllowedHosts checks Options.AllowedHosts. "*" admits every host.
func parseAllowedHosts(list []string) (rules []hostRule, any bool, err error) {
	for _, e := range list {
		s := strings.ToLower(strings.TrimSpace(e))
		if s == "*" {
			any = true
			continue
		}
		host, port, ok := splitHost(s)
		if !ok || host == "" || !validHostName(host) {
			return nil, false, fmt.Errorf("dashboard: AllowedHosts entry %q is not a host name or address with an optional port (like ops.example.com, ops.example.com:8443 or [2001:db8::1])", e)
		}
		rules = append(rules, hostRule{host, port})
	}
	return rules, any, nil
}

// validHostName reports whether h is a DNS name or an IP address.
func validHostName(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
		default:
			return false
		}
	}
	return !strings.HasPrefix(h, ".") && !strings.Contains(h, "..")
}

// splitHost splits a Host header (lower-cased) into host and port: "name",
// "name:8080", "127.0.0.1:8080", "[::1]" or "[::1]:8080". ok is false for
// anything else, the empty string included.
func splitHost(h string) (host, port string, ok bool) {
	h = strings.ToLower(h)
	switch {
	case h == "":
		return "", "", false
	case strings.HasPrefix(h, "["):
		end := strings.IndexByte(h, ']')
		if end < 0 || net.ParseIP(h[1:end]) == nil {
			return "", "", false
		}
		rest := h[end+1:]
		host = h[1:end]
		if rest == "" {
			return host, "", true
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", false
		}
		port = rest[1:]
	case strings.Count(h, ":") == 0:
		return h, "", true
	case strings.Count(h, ":") == 1:
		host, port, _ = strings.Cut(h, ":")
	default:
		return "", "", false // an IPv6 address needs brackets
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || port[0] == '0' {
		return "", "", false
	}
	return host, port, true
}

// isLoopback reports whether host is "localhost" or a loopback address
// (127.0.0.0/8, ::1): names no DNS answer can point elsewhere.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostAllowed reports whether the request's Host header names this
// dashboard: a loopback name or address, an entry of Options.AllowedHosts,
// or, when `delayq dashboard` (internal/dashserve) listens on a
// non-loopback address, that address (for a wildcard address: the address
// the connection came in on) or the name it was given. A page loaded from any other name, such as an attacker's
// domain pointed at 127.0.0.1 (DNS rebinding), is refused.
func (d *Dashboard) hostAllowed(r *http.Request) bool {
	host, port, ok := splitHost(r.Host)
	if !ok {
		return false
	}
	if d.anyHost || isLoopback(host) {
		return true
	}
	for _, h := range d.hosts {
		if h.host == host && (h.port == "" || h.port == port) {
			return true
		}
	}
	name, served := dashserve.Host(r.Context())
	if !served {
		return false
	}
	if name != "" && host == name {
		return true
	}
	// An address is no DNS name an attacker controls: the one the
	// connection reached is this server's own.
	local, _ := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	ip := net.ParseIP(host)
	return local != nil && ip != nil && local.IP.Equal(ip)
}

// credential returns the digest of an Authorization header with its scheme
// name lower-cased (scheme names are case-insensitive), and whether there
// was one.
func credential(header string) ([32]byte, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || scheme == "" {
		return [32]byte{}, header != ""
	}
	return sha256.Sum256([]byte(strings.ToLower(scheme) + " " + strings.TrimLeft(cred, " "))), true
}

// admit returns the digest of an admitted credential for the CSRF token to
// bind to, and whether the request may pass: always, when the dashboard
// has no credentials.
func (d *Dashboard) admit(r *http.Request) (identity []byte, ok bool) {
	if len(d.admitted) == 0 {
		return nil, true
	}
	got, present := credential(r.Header.Get("Authorization"))
	match := 0
	for _, a := range d.admitted {
		match |= subtle.ConstantTimeCompare(got[:], a[:])
	}
	if match == 1 {
		return got[:], true
	}
	if present {
		d.refusedLogins.note(d, r, "dashboard: wrong credentials refused")
	}
	return nil, false
}

// rateLimited writes at most one log line a second; a line counts the
// events since the one before.
type rateLimited struct {
	mu    sync.Mutex
	now   func() time.Time
	last  time.Time
	count int
}

// take counts one event and returns how many to report if a line may be
// written now.
func (l *rateLimited) take() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count++
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	if !l.last.IsZero() && now.Sub(l.last) < time.Second {
		return 0, false
	}
	n := l.count
	l.count, l.last = 0, now
	return n, true
}

func (l *rateLimited) note(d *Dashboard, r *http.Request, msg string) {
	n, ok := l.take()
	if !ok {
		return
	}
	d.log.Warn().Int("count", n).Str("remote", r.RemoteAddr).Str("host", clipBytes(r.Host, 100)).
		Str("path", clipBytes(r.URL.Path, 200)).Msg(msg)
}

// clipBytes cuts s to at most n bytes on a rune boundary.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// CSRF: a session cookie holds random bytes; a form carries the HMAC of
// that value (and of the credentials the request was admitted with) under
// the dashboard's secret. Something that can plant a cookie for the host
// cannot compute the matching token without the secret, and the value in
// the cookie alone is worthless.
//
// Over plain HTTP something else on the host can also plant a cookie of
// the same name with a more specific Path (cookies ignore ports); the
// browser then sends both, the planted one first, on the paths it covers,
// and only the dashboard's own on the others. So nothing trusts the first
// cookie of the name: a page's forms carry a token for each well-formed
// session cookie the page's request brought (at most maxSessions, the
// last ones: browsers send the cookie with the shortest path, the
// dashboard's own, last), joined by '.', and a POST passes when one of its
// tokens is the token of one of the session cookies it brought. The
// dashboard's own cookie (Path = the prefix) reaches every page and every
// POST, so its token always matches; a planted cookie can add tokens to a
// form but not remove the owner's. Over TLS the __Host- prefix keeps such
// cookies out in the first place.
const (
	csrfCookie    = "delayq_csrf"
	csrfCookieTLS = "__Host-delayq_csrf" // over TLS: Secure, Path=/, no Domain
	csrfField     = "csrf"
	// maxSessions bounds the tokens a form carries.
	maxSessions = 8
)

func csrfCookieName(r *http.Request) string {
	if r.TLS != nil {
		return csrfCookieTLS
	}
	return csrfCookie
}

// mac returns the HMAC-SHA256 under the dashboard's secret of the parts,
// each length-prefixed, so that no two lists of parts collide.
func (d *Dashboard) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, d.secret)
	var n [4]byte
	for _, p := range parts {
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		m.Write(n[:])
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func (d *Dashboard) csrfFor(session string, identity []byte) string {
	return base64.RawURLEncoding.EncodeToString(d.mac("csrf", string(identity), session))
}

// sessions returns the values of the request's last maxSessions
// well-formed session cookies, in the order the browser sent them.
func sessions(r *http.Request) []string {
	var out []string
	for _, c := range r.CookiesNamed(csrfCookieName(r)) {
		if validSession(c.Value) {
			out = append(out, c.Value)
		}
	}
	return out[max(len(out)-maxSessions, 0):]
}

// csrfToken returns the token for the request's forms: the tokens of its
// last maxSessions session cookies joined by '.', setting a session
// cookie when the request has none.
func (d *Dashboard) csrfToken(w http.ResponseWriter, r *http.Request) string {
	ss := sessions(r)
	if len(ss) == 0 {
		var raw [32]byte
		_, _ = rand.Read(raw[:]) // never fails on supported platforms
		session := base64.RawURLEncoding.EncodeToString(raw[:])
		path := d.opts.Prefix + "/"
		if r.TLS != nil {
			path = "/" // required by the __Host- prefix
		}
		http.SetCookie(w, &http.Cookie{
			Name:     csrfCookieName(r),
			Value:    session,
			Path:     path,
			HttpOnly: true,
			Secure:   r.TLS != nil,
			SameSite: http.SameSiteStrictMode,
		})
		ss = []string{session}
	}
	tokens := make([]string, len(ss))
	for i, s := range ss {
		tokens[i] = d.csrfFor(s, identityOf(r))
	}
	return strings.Join(tokens, ".")
}

// checkCSRF reports whether one of the form's tokens is the one that one
// of the request's (last maxSessions) session cookies and its credentials
// give.
func (d *Dashboard) checkCSRF(r *http.Request) bool {
	got := strings.Split(r.PostForm.Get(csrfField), ".")
	if len(got) > maxSessions {
		return false
	}
	match := 0
	for _, s := range sessions(r) {
		want := []byte(d.csrfFor(s, identityOf(r)))
		for _, g := range got {
			match |= subtle.ConstantTimeCompare([]byte(g), want)
		}
	}
	return match == 1
}

func validSession(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// identityKey carries the admitted credential's digest to the handlers.
type identityKey struct{}

func identityOf(r *http.Request) []byte {
	id, _ := r.Context().Value(identityKey{}).([]byte)
	return id
}

// Notices: after an action the dashboard redirects to a page whose query
// names the notice ("done"), the id the action handled ("nid") and its
// counts ("n", "failed"), with the time ("t"), signed with the secret
// ("sig"). A link someone made up carries no valid signature and shows
// nothing.
const (
	noticeTTL = 10 * time.Minute
	noticeSig = "sig"
	maxNotice = 80 // runes of an id shown in a notice
)

// signNotice adds a time and a signature to the notice values q.
func (d *Dashboard) signNotice(q url.Values) {
	q.Set("t", strconv.FormatInt(time.Now().Unix(), 10))
	q.Set(noticeSig, d.noticeMAC(q))
}

func (d *Dashboard) noticeMAC(q url.Values) string {
	sum := d.mac("notice", q.Get("done"), q.Get("nid"), q.Get("n"), q.Get("failed"), q.Get("t"))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// flash returns the notice the query asks for when its signature holds and
// it is recent, else "".
func (d *Dashboard) flash(r *http.Request) string {
	q := r.URL.Query()
	format, ok := notices[q.Get("done")]
	if !ok || subtle.ConstantTimeCompare([]byte(q.Get(noticeSig)), []byte(d.noticeMAC(q))) != 1 {
		return ""
	}
	t, err := strconv.ParseInt(q.Get("t"), 10, 64)
	if age := time.Since(time.Unix(t, 0)); err != nil || age > noticeTTL || age < -time.Minute {
		return ""
	}
	n, _ := strconv.Atoi(q.Get("n"))
	failed, _ := strconv.Atoi(q.Get("failed"))
	return fmt.Sprintf(format, strconv.Quote(clipRunes(q.Get("nid"), maxNotice)), n, failed)
}

// clipRunes cuts s to n runes, marking a cut with "…".
func clipRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}
