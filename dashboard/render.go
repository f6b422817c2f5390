package dashboard

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/naming"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"overview", "queue", "job", "dead", "deadjob", "periodic", "batches", "batch", "confirm", "error", "processes", "batchdead"}

func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: parse layout: %w", err)
	}
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// view is what every page template gets.
type view struct {
	Title     string
	Nav       string // "overview", "dead", "periodic", "batches" or a queue name
	Prefix    string
	CSRF      string
	ReadOnly  bool
	Live      bool // the page refreshes itself (when refreshing is on)
	Refresh   int  // seconds between auto-refreshes; 0 for none (set by render)
	Namespace string
	Now       time.Time // server clock
	Flash     string
	Status    int
	Data      any
}

// render writes page name with status. The body is rendered to a buffer
// first, so a template error becomes a clean 500.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, v *view) {
	v.Prefix = d.opts.Prefix
	v.ReadOnly = d.opts.ReadOnly
	v.Namespace = d.b.Namespace()
	v.CSRF = d.csrfToken(w, r)
	v.Status = status
	v.Title = escapeBidi(v.Title)
	if v.Now.IsZero() {
		v.Now = time.Now()
	}
	v.Refresh = 0
	if v.Live && d.opts.RefreshInterval > 0 {
		v.Refresh = int(d.opts.RefreshInterval / time.Second)
	}
	var buf bytes.Buffer
	if err := d.pages[name].ExecuteTemplate(&buf, "layout.html", v); err != nil {
		d.log.Error().Err(err).Str("page", name).Msg("dashboard: render failed")
		http.Error(w, "500 internal error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail renders the error page with status and a message for people.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= 500 {
		d.log.Error().Str("path", r.URL.Path).Int("status", status).Msg(msg)
	}
	d.render(w, r, status, "error", &view{Title: http.StatusText(status), Data: escapeBidi(msg)})
}

// redirect sends the browser to path (under the prefix) after an action,
// with query values for the page and, when q has "done", the signed notice
// shown there.
func (d *Dashboard) redirect(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	u := d.opts.Prefix + path
	if q.Has("done") {
		d.signNotice(q)
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// notices are the only texts a "done" query value can show, and only with
// a valid signature (see Dashboard.flash), so a crafted link cannot put
// words on the page.
var notices = map[string]string{
	"cancelled":         "Job %[1]s cancelled.",
	"cancelled-running": "Job %[1]s cancelled while it ran: its worker was told to stop it; it ends in the dead letters as cancelled unless its handler finishes.",
	"rescheduled":       "Job %[1]s rescheduled.",
	"redriven":          "Job %[1]s sent back to its queue.",
	"deleted":           "Dead job %[1]s deleted.",
	"purged":            "Purged %[2]d dead jobs.",
	"redrive-all":       "Sent %[2]d dead jobs back to their queue; %[3]d could not be (gone, or pending again).",
	"paused":            "Queue %[1]s paused: no worker claims its jobs until it is resumed.",
	"resumed":           "Queue %[1]s resumed.",
	"type-paused":       "Job type %[1]s paused in this queue: its due jobs are parked until it is resumed.",
	"type-resumed":      "Job type %[1]s resumed: %[2]d parked jobs back on the schedule.",
	"key-paused":        "Key %[1]s paused in this queue: its due jobs are held until it is resumed.",
	"key-resumed":       "Key %[1]s resumed: %[2]d held jobs back on the schedule.",
	"capped":            "Concurrency cap of %[1]s set to %[2]d running across all workers.",
	"cap-cleared":       "Concurrency cap of %[1]s cleared.",
	"limited":           "Rate limit of %[1]s set to %[2]d starts per period across all workers.",
	"limit-cleared":     "Rate limit of %[1]s cleared.",
	"schedule-paused":   "Schedule %[1]s paused: no scheduler enqueues its ticks until it is resumed.",
	"schedule-resumed":  "Schedule %[1]s resumed: its ticks from now on run; those due while it was paused do not.",
	"run-requested":     "Run now requested as job %[1]s: a scheduler that declares the schedule enqueues it within a second.",
	"run-enqueued":      "Job %[1]s of this run-now request was enqueued already; nothing more was requested.",

	// The per-key caps and rate limits (setKeyCap, setKeyLimit): of one
	// key, or "default-" for the default of every key of the queue.
	"key-capped":                "Concurrency cap of key %[1]s set to %[2]d running across all workers; it wins over the queue's default key cap.",
	"key-cap-cleared":           "Own concurrency cap of key %[1]s cleared: the queue's default key cap applies to it.",
	"default-key-capped":        "Default key cap of queue %[1]s set to %[2]d running per key across all workers; a key's own cap wins over it.",
	"default-key-cap-cleared":   "Default key cap of queue %[1]s cleared: keys without a cap of their own are uncapped.",
	"key-limited":               "Rate limit of key %[1]s set to %[2]d starts per period across all workers; it wins over the queue's default key rate limit.",
	"key-limit-cleared":         "Own rate limit of key %[1]s cleared: the queue's default key rate limit applies to it.",
	"default-key-limited":       "Default key rate limit of queue %[1]s set to %[2]d starts per period per key across all workers; a key's own limit wins over it.",
	"default-key-limit-cleared": "Default key rate limit of queue %[1]s cleared: keys without a limit of their own are unlimited.",

	// Fair turns between keys (setKeyFair).
	"key-fair-on":  "Fair turns between keys on in queue %[1]s: claims deal their room out among the keys with due jobs in turns, and a key's due jobs wait for its turn.",
	"key-fair-off": "Fair turns between keys off in queue %[1]s: the jobs waiting for a turn went back to the schedule, claimed in ready order.",
}

var funcs = template.FuncMap{
	"ts":        formatTime,
	"rel":       relative,
	"dur":       formatDuration,
	"rate":      rateText,
	"num":       formatCount,
	"bytes":     formatBytes,
	"payload":   formatPayload,
	"firstLine": firstLine,
	"add":       func(a, b int) int { return a + b },
	"pct":       percent,
	"result":    formatResult,
	"pathq":     url.PathEscape, // a queue name as one path segment
	"leaseLeft": leaseLeft,
	"since":     since,
	"queueOr":   queueOr,
}

// queueOr is q, or the default queue's name when it is empty (a next job
// of a chain that names none).
func queueOr(q string) string {
	if q == "" {
		return naming.DefaultQueue
	}
	return q
}

// escapeBidi writes the bidirectional formatting characters of s (the
// embeddings, overrides and isolates, and the marks) as \u escapes, for
// text that cannot be isolated in markup: a page title, or a message that
// quotes input.
func escapeBidi(s string) string {
	if !strings.ContainsFunc(s, isBidiControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isBidiControl(r) {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isBidiControl(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
	default:
		return false
	}
	return true
}

// formatTime renders t in UTC to the second; "—" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// relative renders t against now: "in 4m10s", "3s ago", "now".
func relative(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := t.Sub(now)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + formatDuration(d)
	default:
		return formatDuration(-d) + " ago"
	}
}

// formatDuration rounds d for reading: ms below a second, then s, m, h, d.
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// formatCount groups digits: 1234567 → "1,234,567".
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Showing a payload must cost what the payload costs: an indented copy of
// JSON nested n levels deep holds about n² bytes of indentation (json.Indent
// made a 200 MB page of a 20 KB payload), so formatPayload indents with a
// bounded indenter and shows the payload as stored beyond its bounds.
const (
	// maxIndentDepth is the deepest nesting formatPayload indents.
	maxIndentDepth = 32
	// indentGrowth and indentSlack bound an indented payload to
	// indentGrowth times its length plus indentSlack bytes.
	indentGrowth = 4
	indentSlack  = 4 << 10
)

// formatPayload shows a payload for reading: indented JSON, text as is, or
// base64 for bytes that are not UTF-8. JSON nested deeper than
// maxIndentDepth, or whose indented form would be longer than indentGrowth
// times its length plus indentSlack, is shown as stored after a line that
// says why. The result is at most indentGrowth times as long as p plus
// indentSlack (base64: 4/3), and takes time in proportion; the template
// escapes it.
func formatPayload(p []byte) string {
	switch {
	case len(p) == 0:
		return "(empty)"
	case json.Valid(p):
		if s, ok := indentJSON(p, maxIndentDepth, indentGrowth*len(p)+indentSlack); ok {
			return unescapeHTMLInJSON(s)
		}
		return fmt.Sprintf("(%d bytes of JSON, too deeply nested to indent; as stored)\n", len(p)) + unescapeHTMLInJSON(string(p))
	case utf8.Valid(p):
		return string(p)
	default:
		return fmt.Sprintf("(%d bytes, not UTF-8; base64)\n%s", len(p), base64.StdEncoding.EncodeToString(p))
	}
}

// indentJSON indents src, which must be valid JSON, as json.Indent with
// no prefix and two spaces does: one member or element a line, "key":
// value, empty objects and arrays as {} and []. It gives up, returning
// false, when the nesting goes deeper than maxDepth or the output would
// be longer than budget bytes. A first pass measures the output, so it
// allocates the output's bytes once, and only when it fits.
func indentJSON(src []byte, maxDepth, budget int) (string, bool) {
	measure := indenter{maxDepth: maxDepth, budget: budget}
	if !measure.run(src) {
		return "", false
	}
	out := indenter{maxDepth: maxDepth, budget: budget, out: new(strings.Builder)}
	out.out.Grow(measure.n)
	out.run(src)
	return out.out.String(), true
}

// indenter is one pass of indentJSON: it writes to out, or only counts
// the bytes in n when out is nil.
type indenter struct {
	maxDepth, budget int
	out              *strings.Builder
	n                int
}

func (w *indenter) write(p []byte) {
	w.n += len(p)
	if w.out != nil {
		w.out.Write(p)
	}
}

func (w *indenter) writeByte(c byte) {
	w.n++
	if w.out != nil {
		w.out.WriteByte(c)
	}
}

// spaces holds the indentation of the deepest line indentJSON writes.
var spaces = []byte(strings.Repeat(" ", 2*maxIndentDepth))

func (w *indenter) newline(depth int) {
	w.writeByte('\n')
	for depth > 0 {
		k := min(depth, len(spaces)/2)
		w.write(spaces[:2*k])
		depth -= k
	}
}

// run indents src and reports whether it kept within maxDepth and budget.
func (w *indenter) run(src []byte) bool {
	depth := 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			j := i + 1
			for ; j < len(src) && src[j] != '"'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			w.write(src[i:min(j+1, len(src))])
			i = j
		case '{', '[':
			k := i + 1
			for k < len(src) && isJSONSpace(src[k]) {
				k++
			}
			if k < len(src) && (src[k] == '}' || src[k] == ']') {
				w.writeByte(c)
				w.writeByte(src[k])
				i = k
				break
			}
			if depth++; depth > w.maxDepth {
				return false
			}
			w.writeByte(c)
			w.newline(depth)
		case '}', ']':
			depth--
			w.newline(depth)
			w.writeByte(c)
		case ',':
			w.writeByte(',')
			w.newline(depth)
		case ':':
			w.writeByte(':')
			w.writeByte(' ')
		default: // numbers, true, false, null
			w.writeByte(c)
		}
		if w.n > w.budget {
			return false
		}
	}
	return true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// formatResult shows a succeeded job's result as formatPayload does;
// "(none set)" when the handler set none.
func formatResult(r []byte) string {
	if r == nil {
		return "(none set)"
	}
	return formatPayload(r)
}

// percent writes a fraction 0..1 as a percentage to one decimal, without a
// trailing ".0": 0.425 is "42.5", 0.42 is "42".
func percent(f float64) string {
	return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64)
}

// unescapeHTMLInJSON turns the \u003c, \u003e and \u0026 escapes that
// encoding/json writes for <, > and & back into the characters, so a payload
// reads as it was sent (the template escapes them for HTML in any case). An
// escaped backslash is stepped over whole, so "\\u003c" stays as it is.
func unescapeHTMLInJSON(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] == 'u' && i+6 <= len(s) {
			switch strings.ToLower(s[i+2 : i+6]) {
			case "003c":
				b.WriteByte('<')
				i += 5
				continue
			case "003e":
				b.WriteByte('>')
				i += 5
				continue
			case "0026":
				b.WriteByte('&')
				i += 5
				continue
			}
		}
		b.WriteString(s[i : i+2])
		i++
	}
	return b.String()
}

// firstLine returns the first line of s, cut to at most n bytes (on a rune
// boundary), with "…" when anything was dropped.
func firstLine(s string, n int) string {
	line, _, cut := strings.Cut(s, "\n")
	if len(line) > n {
		i := n
		for i > 0 && !utf8.RuneStart(line[i]) {
			i--
		}
		line, cut = line[:i], true
	}
	if cut {
		line += " …"
	}
	return line
}

// since is how long now is after t (how long a due job has waited), 0 when
// t is zero or not before now.
func since(t, now time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return max(now.Sub(t), 0)
}

// leaseLeft is how long a processing job's lease has left at now, 0 when it
// ran out.
func leaseLeft(deadline, now time.Time) time.Duration {
	return max(deadline.Sub(now), 0)
}
