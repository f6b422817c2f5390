package cli

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// redacted stands for a password in a URL, as url.URL.Redacted writes it.
const redacted = "xxxxx"

// redactURL returns the URL with its password replaced by "xxxxx". A URL
// without an '@' has none and is returned as it is. One that url.Parse
// reads with its user information is redacted by url.URL.Redacted; for any
// other, everything between the scheme and the last '@' is taken for the
// user information (as url.Parse would, were the URL well formed), and all
// of it after the first ':' is replaced, or all of it when there is no ':'.
func redactURL(raw string) string {
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw // no user information, so no password
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	user, _, hasPassword := strings.Cut(raw[start:at], ":")
	if !hasPassword {
		user = "" // a lone field may be a password
	} else {
		user += ":"
	}
	return raw[:start] + user + redacted + raw[at:]
}

// parseRedisURL is redis.ParseURL whose errors never hold the password:
// url.Parse's errors quote the whole URL, and a password with a '/' or '?'
// in it leaks into their detail too, so an error is taken from parsing the
// redacted URL instead.
func parseRedisURL(raw string) (*redis.Options, error) {
	opts, err := redis.ParseURL(raw)
	if err == nil {
		return opts, nil
	}
	red := redactURL(raw)
	if red == raw {
		return nil, err
	}
	if _, rerr := redis.ParseURL(red); rerr != nil {
		return nil, rerr
	}
	return nil, fmt.Errorf("parse %q: its user or password does not parse (percent-encode '@', ':', '/', '?', '#' and '%%' in them)", red)
}

// termSafe makes s safe to print on a terminal: C0 control characters
// (except, with layout, newline and tab), DEL, C1 control characters, the
// bidirectional formatting characters and bytes that are not UTF-8 are
// written as escapes (\x1b, \r, \u0085, \u202e, \xff), so a stored error
// cannot move the cursor, change colours, clear the screen or reorder the
// line it is on. JSON output never goes through it.
func termSafe(s string, layout bool) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, layout) || r == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case !needsEscape(r, layout):
			b.WriteString(s[:size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		s = s[size:]
	}
	return b.String()
}

func needsEscape(r rune, layout bool) bool {
	switch {
	case layout && (r == '\n' || r == '\t'):
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // embeddings, overrides, isolates
		return true
	}
	return false
}

// asciiJSON rewrites encoded JSON so that it holds only printable ASCII:
// DEL and every character from U+0080 on become \u escapes (a pair of
// them for a character beyond U+FFFF). Outside strings JSON is ASCII
// already, so a decoder reads the same values; C1 controls and
// bidirectional overrides can no longer act on the terminal that shows it.
func asciiJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		if c := b[i]; c < 0x7f {
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		i += n
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			continue
		}
		out = fmt.Appendf(out, `\u%04x`, r)
	}
	return out
}
