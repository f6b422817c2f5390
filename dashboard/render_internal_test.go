package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/admin"
)

func TestFormatPayload(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{``, "(empty)"},
		{`{"a":1,"b":[true]}`, "{\n  \"a\": 1,\n  \"b\": [\n    true\n  ]\n}"},
		{`{"s":"\u003cb\u003e \u0026 \u003C"}`, "{\n  \"s\": \"<b> & <\"\n}"},
		{`{"s":"\\u003cb"}`, "{\n  \"s\": \"\\\\u003cb\"\n}"}, // an escaped backslash, then text
		{`{"s":"\u00e9\n"}`, "{\n  \"s\": \"\\u00e9\\n\"\n}"},
		{`plain <text>`, "plain <text>"},
		{"\xff\x00", "(2 bytes, not UTF-8; base64)\n/wA="},
	} {
		if got := formatPayload([]byte(c.in)); got != c.want {
			t.Errorf("formatPayload(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestFormatters(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", -time.Second: "0s", 450 * time.Millisecond: "450ms", 2500 * time.Millisecond: "2.5s",
		4*time.Minute + 10*time.Second: "4m10s", 26*time.Hour + 5*time.Minute: "26h05m", 100 * time.Hour: "4d04h",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := formatCount(n); got != want {
			t.Errorf("formatCount(%d) = %q, want %q", n, got, want)
		}
	}
	now := time.UnixMilli(1_800_000_000_000)
	for at, want := range map[time.Time]string{
		{}: "—", now: "now", now.Add(90 * time.Second): "in 1m30s", now.Add(-3 * time.Second): "3.0s ago",
	} {
		if got := relative(at, now); got != want {
			t.Errorf("relative(%v) = %q, want %q", at, got, want)
		}
	}
	if got := formatTime(now); got != "2027-01-15 08:00:00Z" {
		t.Errorf("formatTime = %q", got)
	}
	if got := firstLine("first\nsecond", 80); got != "first …" {
		t.Errorf("firstLine two lines = %q", got)
	}
	if got := firstLine("héllo", 2); got != "h …" {
		t.Errorf("firstLine cut inside a rune = %q", got)
	}
	if got := firstLine("short", 80); got != "short" {
		t.Errorf("firstLine short = %q", got)
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]float64{0: 1, -5: 1, 0.3: 0.5, 1: 1, 1.1: 2, 3: 5, 7: 10, 42: 50, 180: 200, 1234: 2000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

func TestChartSVG(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	h := make([]admin.Minute, 60)
	for i := range h {
		h[i] = admin.Minute{Start: start.Add(time.Duration(i) * time.Minute), Claimed: 4, Done: 3, Failed: 1,
			LatenessSum: 400 * time.Millisecond, LatenessMax: 250 * time.Millisecond}
	}
	h[30].Dead = 2
	c := historyCharts(h, `<queue "x">`, 560, 170)
	if c.Total != 60*4+2 || c.Dead != 2 || c.MaxLateness != 250*time.Millisecond {
		t.Fatalf("totals %+v", c)
	}
	bars := string(c.Handled.SVG())
	if n := strings.Count(bars, `class="s-done"`); n != 60 {
		t.Errorf("%d done bars, want 60", n)
	}
	if n := strings.Count(bars, `class="s-dead"`); n != 1 {
		t.Errorf("%d dead bars, want 1", n)
	}
	for _, want := range []string{`aria-label="Jobs handled per minute, &lt;queue &#34;x&#34;&gt;"`, ">10:00<", ">10:15<", "<title>10:30 — 3 done, 1 failed, 2 dead</title>", ">2<", ">4<", ">6<"} {
		if !strings.Contains(bars, want) {
			t.Errorf("bar chart lacks %q", want)
		}
	}
	lines := string(c.Lateness.SVG())
	for _, want := range []string{`<polyline class="s-max"`, `<polyline class="s-mean"`, "<title>10:00 — max 250ms, mean 100ms</title>", ">100ms<", ">300ms<"} {
		if !strings.Contains(lines, want) {
			t.Errorf("line chart lacks %q", want)
		}
	}
	if strings.Contains(bars+lines, "<queue") {
		t.Error("the label was not escaped")
	}
	empty := chart{Label: "e", W: 10, H: 10, Format: countLabel}
	if got := string(empty.SVG()); !strings.HasSuffix(got, "</svg>") || strings.Contains(got, "<rect") {
		t.Errorf("empty chart %q", got)
	}
	spark := string(sparkline(h, "q").SVG())
	if strings.Contains(spark, "<text") || strings.Count(spark, "<rect") != 60 {
		t.Errorf("sparkline has axes or the wrong bars: %s", spark)
	}
}

// Minutes without claims have no lateness: the lines break there instead of
// dropping to zero.
func TestLatenessGaps(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	h := make([]admin.Minute, 6)
	for i := range h {
		h[i].Start = start.Add(time.Duration(i) * time.Minute)
	}
	for _, i := range []int{0, 1, 3} {
		h[i].Claimed, h[i].LatenessSum, h[i].LatenessMax = 1, time.Second, time.Second
	}
	svg := string(historyCharts(h, "q", 560, 170).Lateness.SVG())
	if n := strings.Count(svg, `<polyline class="s-mean"`); n != 2 {
		t.Fatalf("%d mean lines, want 2 (minutes 0–1, and 3 alone):\n%s", n, svg)
	}
	if !strings.Contains(svg, "<title>10:02 — max —, mean —</title>") {
		t.Errorf("no empty tooltip for a minute without claims:\n%s", svg)
	}
}
