package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// table writes aligned columns. Cells are made safe for terminals
// (termSafe): a control character in a stored error cannot reach it.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	safe := make([]string, len(cells))
	for i, c := range cells {
		safe[i] = termSafe(c, false)
	}
	fmt.Fprintln(t.tw, strings.Join(safe, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// flushPage writes a listing's table and, when there is more, the cursor
// of the next page.
func (a *app) flushPage(t *table, next string) error {
	if err := t.flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(a.stdout, "more: --cursor %s\n", next)
	}
	return nil
}

// details is the "Label: value" output of jobs show and dead show, aligned,
// starting with the job's id and queue.
type details struct{ *table }

func newDetails(w io.Writer, id, queue string) details {
	t := details{newTable(w, "ID:", id)}
	t.row("Queue:", queue)
	return t
}

// headers adds one row per header, sorted by name.
func (t details) headers(h map[string]string) {
	for _, k := range sortedKeys(h) {
		t.row("Header:", k+"="+h[k])
	}
}

// body adds the stored bytes of a job whose envelope does not decode.
func (t details) body(b []byte) {
	t.row("Body:", "base64:"+base64.StdEncoding.EncodeToString(b))
}

// timeLayout prints instants in UTC, to the second.
const timeLayout = "2006-01-02 15:04:05Z"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

// jsonTime is an instant for JSON: RFC 3339 in UTC, omitted when zero.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// fmtDur prints a duration rounded for people: milliseconds below a second,
// tenths of seconds below a minute, whole seconds above, without trailing
// zero units ("1m", not "1m0s").
func fmtDur(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// relative prints at relative to now: "in 5m" or "3s ago".
func relative(at, now time.Time) string {
	if at.IsZero() {
		return "-"
	}
	d := at.Sub(now)
	switch {
	case d > 0:
		return "in " + fmtDur(d)
	case d == 0:
		return "now"
	default:
		return fmtDur(d) + " ago"
	}
}

// clip shortens s to one line of at most n runes.
func clip(s string, n int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// firstLine returns the first line of s, clipped to n runes, with "…" when
// anything was left out.
func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	line, rest, more := strings.Cut(s, "\n")
	line = strings.TrimSpace(line)
	if more && strings.TrimSpace(rest) != "" && utf8.RuneCountInString(line) < n {
		return line + " …"
	}
	return clip(line, n)
}

// orDash prints "-" for an empty string.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// payloadJSON returns a payload for JSON output: itself when it is JSON,
// else a base64 string.
func payloadJSON(p []byte) any {
	if len(p) == 0 {
		return nil
	}
	if json.Valid(p) {
		return json.RawMessage(p)
	}
	return base64.StdEncoding.EncodeToString(p)
}

// payloadText returns a payload for people.
func payloadText(p []byte) string {
	switch {
	case len(p) == 0:
		return "-"
	case json.Valid(p):
		return string(p)
	default:
		return "base64:" + base64.StdEncoding.EncodeToString(p)
	}
}

// parseWhen parses --since and --until: an RFC 3339 time, or a duration
// before now ("2h" means two hours ago).
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("invalid --%s %q: want an RFC 3339 time or a duration ago such as 2h", flag, v)
}

// parseIn parses a non-negative --in duration.
func parseIn(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, usagef("invalid --in %q: want a non-negative duration such as 10s or 1h30m", v)
	}
	return d, nil
}

// parseAt parses --at.
func parseAt(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usagef("invalid --at %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", v)
	}
	return t, nil
}
