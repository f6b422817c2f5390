package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

// nested returns n open brackets then n closing ones: the payload that
// made json.Indent write a page of about n² bytes.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// hostilePayloads are payloads whose indented form json.Indent makes far
// longer than they are, and the widest legitimate shapes.
func hostilePayloads() map[string][]byte {
	deep := nested(9998) // 19,996 bytes, a 199,962,830-byte page with json.Indent
	many := "[" + strings.Repeat(deep+",", 51) + deep + "]"
	obj := strings.Repeat(`{"a":`, maxIndentDepth+1) + "1" + strings.Repeat("}", maxIndentDepth+1)
	return map[string][]byte{
		"brackets 9998 deep":                []byte(deep),
		"52 values 9998 deep (1,039,845 B)": []byte(many),
		"objects one past the depth cap":    []byte(obj),
		"10001 deep (not JSON to Go)":       []byte(nested(10001)),
		"1 MiB of one-digit elements":       []byte("[" + strings.Repeat("0,", 1<<19-1) + "0]"),
		"1 MiB array at the depth cap":      []byte(strings.Repeat("[", maxIndentDepth-1) + "[" + strings.Repeat("0,", 1<<18) + "0]" + strings.Repeat("]", maxIndentDepth-1)),
		"1 MiB of escaped <>&":              []byte(`["` + strings.Repeat(`\u003c\u003e\u0026`, 1<<20/18) + `"]`),
		"1 MiB of empty arrays":             []byte("[" + strings.Repeat("[],", 1<<18) + "[]]"),
	}
}

// formatBound is what formatPayload may write for p: indentGrowth times
// its length plus indentSlack bytes.
func formatBound(p []byte) int { return indentGrowth*len(p) + indentSlack }

// TestFormatPayloadBounded formats each hostile payload and checks that the
// text is at most 4 times as long as the payload plus 4 KiB and that
// formatting it allocates at most 4 times its length plus 512 KiB (the
// stack of up to 10,000 levels that json.Valid keeps). Time follows: the
// indenter makes two passes that each read every byte once and write each
// output byte once; see BenchmarkFormatPayloadHostile. json.Indent wrote 199,962,830 bytes for
// the first payload and ran out of memory on the second.
func TestFormatPayloadBounded(t *testing.T) {
	// Not parallel: the allocation count is the process's.
	for name, p := range hostilePayloads() {
		var out string
		allocated := allocatedBy(func() { out = formatPayload(p) })
		if len(out) > formatBound(p) {
			t.Errorf("%s: %d bytes formatted to %d, over the bound of %d", name, len(p), len(out), formatBound(p))
		}
		if limit := uint64(4*len(p) + 512<<10); allocated > limit {
			t.Errorf("%s: formatting %d bytes allocated %d, over %d", name, len(p), allocated, limit)
		}
		t.Logf("%s: %d bytes shown as %d, %d allocated", name, len(p), len(out), allocated)
	}
}

// allocatedBy returns the bytes the process allocated while fn ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestFormatPayloadFallsBackToStored: JSON beyond the depth cap, or whose
// indented form would pass the output bound, is shown as stored after a
// line that says so; JSON at the cap is indented.
func TestFormatPayloadFallsBackToStored(t *testing.T) {
	t.Parallel()
	atCap := nested(maxIndentDepth + 1) // the innermost [] is not a level
	if got, want := formatPayload([]byte(atCap)), mustIndent(t, atCap); got != want {
		t.Errorf("%d levels: got %q, want the indented %q", maxIndentDepth, got, want)
	}
	for _, p := range []string{
		nested(maxIndentDepth + 2),
		strings.Repeat(`{"<":`, maxIndentDepth+1) + `"\u003c"` + strings.Repeat("}", maxIndentDepth+1),
		strings.Repeat("[", 20) + strings.Repeat("1,", 5000) + "1" + strings.Repeat("]", 20), // 40 spaces a digit
	} {
		want := fmt.Sprintf("(%d bytes of JSON, too deeply nested to indent; as stored)\n%s", len(p), unescapeHTMLInJSON(p))
		if got := formatPayload([]byte(p)); got != want {
			t.Errorf("formatPayload(%.40q…) = %.120q…, want it as stored", p, got)
		}
	}
}

func mustIndent(t testing.TB, p string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(p), "", "  "); err != nil {
		t.Fatalf("json.Indent(%q): %v", p, err)
	}
	return buf.String()
}

// TestIndentJSONMatchesEncodingJSON: within its bounds the indenter writes
// what json.Indent writes.
func TestIndentJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		`{}`, `[]`, `[ ]`, "{ \n }", `1`, ` -1.5e3 `, `"s"`, `true`, `null`,
		`{"a":1,"b":[true,false,null],"c":{"d":"e\"f\\","g":[]},"h":{}}`,
		" [ 1 , [ 2 , { } ] , \"x y\" ] ",
		`{"k":"[{,:}]","l":"\\\"","m":"\u00e9"}`,
		`[[],[[]],[{}],{"":[]}]`,
	} {
		got, ok := indentJSON([]byte(p), maxIndentDepth, 1<<20)
		if want := mustIndent(t, p); !ok || got != strings.TrimSpace(want) {
			t.Errorf("indentJSON(%q) = %q, %v; json.Indent gives %q", p, got, ok, want)
		}
	}
}

// FuzzFormatPayload: whatever the bytes, formatPayload's text is at most
// indentGrowth times their length plus indentSlack; JSON it indents reads
// as json.Indent writes it, and JSON it does not is shown as stored.
func FuzzFormatPayload(f *testing.F) {
	for _, p := range []string{`{"a":1,"b":[true]}`, nested(40), nested(3), `[1,[2,[3,[4]]]]`, `{"s":"\u003c"}`, "plain", "\xff", `[` + strings.Repeat(`0,`, 300) + `0]`} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		out := formatPayload(p)
		if len(out) > formatBound(p) {
			t.Fatalf("%d bytes formatted to %d, over the bound of %d", len(p), len(out), formatBound(p))
		}
		if len(p) == 0 || !json.Valid(p) {
			if utf8.Valid(p) && len(p) > 0 && out != string(p) {
				t.Fatalf("text %q shown as %q", p, out)
			}
			return
		}
		if header, rest, ok := strings.Cut(out, "\n"); ok && strings.HasSuffix(header, "too deeply nested to indent; as stored)") {
			if rest != unescapeHTMLInJSON(string(p)) {
				t.Fatalf("JSON %q shown as %q, not as stored", p, rest)
			}
			return
		}
		if want := unescapeHTMLInJSON(strings.TrimSpace(mustIndent(t, string(p)))); out != want {
			t.Fatalf("JSON %q indented as %q, json.Indent gives %q", p, out, want)
		}
	})
}

// BenchmarkFormatPayloadHostile formats the hostile payloads; MB/s is of
// the payload's bytes.
func BenchmarkFormatPayloadHostile(b *testing.B) {
	for name, p := range hostilePayloads() {
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				formatPayload(p)
			}
		})
	}
}
