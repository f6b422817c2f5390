package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"redis://user:SuperSecretPw@127.0.0.1:6379/0":       "redis://user:xxxxx@127.0.0.1:6379/0",
		"redis://:SuperSecretPw@127.0.0.1:6379/0":           "redis://:xxxxx@127.0.0.1:6379/0",
		"rediss://user:SuperSecretPw@redis.internal:6380/1": "rediss://user:xxxxx@redis.internal:6380/1",
		"redis://127.0.0.1:6379/0":                          "redis://127.0.0.1:6379/0",
		"redis://user@127.0.0.1/0":                          "redis://user@127.0.0.1/0",
		// Not parsable by url.Parse: the user information is found by hand.
		"redis://user:SuperSecretPw@127.0.0.1:notaport/0":    "redis://user:xxxxx@127.0.0.1:notaport/0",
		"redis://user:Super/Secret?Pw@127.0.0.1:6379/0":      "redis://user:xxxxx@127.0.0.1:6379/0",
		"redis://user:Super%zzSecretPw@127.0.0.1:6379/0":     "redis://user:xxxxx@127.0.0.1:6379/0",
		"redis://user:Sup@er:Secret@Pw@127.0.0.1:notaport/0": "redis://user:xxxxx@127.0.0.1:notaport/0",
		"redis://SuperSecretPw@127.0.0.1:notaport/0":         "redis://xxxxx@127.0.0.1:notaport/0",
		"user:SuperSecretPw@127.0.0.1:6379":                  "user:xxxxx@127.0.0.1:6379",
		"redis://user:Super\"Secret\u00e9Pw@127.0.0.1:bad/0": "redis://user:xxxxx@127.0.0.1:bad/0",
		"redis://127.0.0.1:notaport/0":                       "redis://127.0.0.1:notaport/0",
		// Several addresses.
		"redis+cluster://ops:SuperSecretPw@h1:7000,h2:7001":       "redis+cluster://ops:xxxxx@h1:7000,h2:7001",
		"rediss+sentinel://:SuperSecretPw@h1,h2:26380/mymaster/1": "rediss+sentinel://:xxxxx@h1,h2:26380/mymaster/1",
		"redis+cluster://ops:Super/Secret?Pw@h1:7000,h2:bad":      "redis+cluster://ops:xxxxx@h1:7000,h2:bad",
		"redis+cluster://": "redis+cluster://",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Whatever part of the URL is wrong, the error never holds the password
// or a piece of it.
func TestParseRedisURLErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://user:SuperSecretPw@127.0.0.1:notaport/0",
		"redis://user:Super/Secret?Pw@127.0.0.1:6379/0",
		"redis://user:Super#SecretPw@127.0.0.1:6379/0",
		"redis://user:Super%zzSecretPw@127.0.0.1:6379/0",
		"redis://user:Super Secret\x7fPw@127.0.0.1:6379/0",
		"redis://user:SuperSecretPw@127.0.0.1:6379/not-a-db",
		"redis://user:SuperSecretPw@127.0.0.1:6379/0?bogus=1",
		"http://user:SuperSecretPw@127.0.0.1:6379/0",
		"user:SuperSecretPw@127.0.0.1:6379",
		"redis://SuperSecretPw@127.0.0.1:notaport/0",
		"redis://user:SuperSecretPw@[::1/0",
	} {
		_, err := parseRedisURL(raw)
		if err == nil {
			t.Errorf("%q: no error", raw)
			continue
		}
		for _, piece := range []string{"Super", "Secret", "Pw@"} {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("%q: error %q shows %q", raw, err, piece)
			}
		}
	}
	if _, err := parseRedisURL("redis://user:SuperSecretPw@127.0.0.1:6379/0"); err != nil {
		t.Fatalf("a good URL: %v", err)
	}
}

func TestTermSafe(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in     string
		layout bool
		want   string
	}{
		{"plain text, ünïcode ok", false, "plain text, ünïcode ok"},
		{"\x1b[31mred\x1b[0m", false, `\x1b[31mred\x1b[0m`},
		{"nul\x00bell\a del\x7f", false, `nul\x00bell\x07 del\x7f`},
		{"cr\rover", false, `cr\rover`},
		{"c1 \u0085 \u009b2J", false, `c1 \u0085 \u009b2J`},
		{"bidi \u202eevil\u202c \u2066x\u2069 \u200f", false, `bidi \u202eevil\u202c \u2066x\u2069 \u200f`},
		{"bad \xff\xfe utf-8", false, `bad \xff\xfe utf-8`},
		{"replacement \ufffd stays", false, "replacement \ufffd stays"},
		{"line\n\tstack", false, `line\n\tstack`},
		{"line\n\tstack\r\x1b", true, "line\n\tstack\\r\\x1b"},
	} {
		if got := termSafe(c.in, c.layout); got != c.want {
			t.Errorf("termSafe(%q, %v) = %q, want %q", c.in, c.layout, got, c.want)
		}
	}
}

// TestASCIIJSON: asciiJSON leaves printable ASCII alone and writes DEL,
// C1 controls, bidi overrides, other non-ASCII characters and characters
// beyond U+FFFF (as a surrogate pair) as \u escapes; the JSON decodes to
// the same value.
func TestASCIIJSON(t *testing.T) {
	t.Parallel()
	in := "{\"s\":\"a\x7f\u0085\u009b\u202e\u2066é😀\\n\\\"\",\"n\":[1,true,null]}\n"
	want := `{"s":"a\u007f\u0085\u009b\u202e\u2066\u00e9\ud83d\ude00\n\"","n":[1,true,null]}` + "\n"
	got := string(asciiJSON([]byte(in)))
	if got != want {
		t.Fatalf("asciiJSON(%q)\n = %q\nwant %q", in, got, want)
	}
	var a, b any
	if err := json.Unmarshal([]byte(in), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(got), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("decoded %v, want %v", b, a)
	}
}
