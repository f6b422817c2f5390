package dashboard

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/admin"
)

func labels(ts []tick) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Label
	}
	return out
}

// The tick choice of both axes for empty, tiny and large ranges.
func TestAxisTicks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max  float64
		want string
	}{
		{0, "0 1 2"}, // a fresh queue
		{math.NaN(), "0 1 2"},
		{-3, "0 1 2"},
		{0.4, "0 1 2"},
		{1, "0 1 2"},
		{2, "0 1 2"},
		{3, "0 1 2 3"},
		{4, "0 1 2 3 4"},
		{5, "0 2 4 6"},
		{6, "0 2 4 6"},
		{9, "0 5 10"},
		{10, "0 5 10"},
		{42, "0 20 40 60"},
		{180, "0 50 100 150 200"},
		{1234, "0 500 1,000 1,500"},
		{2e6, "0 500,000 1,000,000 1,500,000 2,000,000"},
		{7.5e9, "0 2,000,000,000 4,000,000,000 6,000,000,000 8,000,000,000"},
	} {
		if got := strings.Join(labels(countTicks(c.max)), " "); got != c.want {
			t.Errorf("countTicks(%v) = %q, want %q", c.max, got, c.want)
		}
	}
	const s, m, h, d = 1e3, 60e3, 3600e3, 24 * 3600e3
	for _, c := range []struct {
		maxMs float64
		want  string
	}{
		{0, "0 1ms 2ms"}, // no claims in the hour
		{math.NaN(), "0 1ms 2ms"},
		{0.3, "0 1ms 2ms"},
		{1, "0 1ms 2ms"},
		{3, "0 1ms 2ms 3ms"},
		{7, "0 2ms 4ms 6ms 8ms"},
		{45, "0 20ms 40ms 60ms"},
		{250, "0 100ms 200ms 300ms"},
		{900, "0 0.5s 1s"},
		{1400, "0 0.5s 1s 1.5s"},
		{2500, "0 1s 2s 3s"},
		{45 * s, "0 15s 30s 45s"},
		{100 * s, "0 30s 60s 90s 120s"},
		{3 * m, "0 1m 2m 3m"},
		{50 * m, "0 15m 30m 45m 60m"},
		{100 * m, "0 30m 60m 90m 120m"},
		{3 * h, "0 1h 2h 3h"},
		{40 * h, "0 12h 24h 36h 48h"},
		{3 * d, "0 1d 2d 3d"},
		{40 * d, "0 10d 20d 30d 40d"},
		{400 * d, "0 100d 200d 300d 400d"},
	} {
		if got := strings.Join(labels(durationTicks(c.maxMs)), " "); got != c.want {
			t.Errorf("durationTicks(%v ms) = %q, want %q", c.maxMs, got, c.want)
		}
	}
}

// For any largest value, both axes have 3 to 5 ticks from 0 in equal
// steps, reaching at least the value, with distinct labels, one unit
// throughout, and the labels say the tick's value.
func TestAxisTicksAlwaysReadable(t *testing.T) {
	t.Parallel()
	unit := regexp.MustCompile(`^([0-9.]+)(ms|s|m|h|d)$`)
	unitMs := map[string]float64{"ms": 1, "s": 1e3, "m": 60e3, "h": 3600e3, "d": 24 * 3600e3}
	for v := 0.0; v < 1e11; v = v*1.07 + 0.13 {
		for _, kind := range []string{"count", "duration"} {
			ts := countTicks(v)
			if kind == "duration" {
				ts = durationTicks(v)
			}
			ls := labels(ts)
			if len(ts) < 3 || len(ts) > 5 || ts[0].V != 0 || ts[0].Label != "0" || ts[len(ts)-1].V < v {
				t.Fatalf("%s ticks for %v: %+v", kind, v, ts)
			}
			step := ts[1].V
			var units []string
			for i, tk := range ts {
				if tk.V != float64(i)*step {
					t.Fatalf("%s ticks for %v not evenly spaced: %+v", kind, v, ts)
				}
				if i == 0 {
					continue
				}
				if kind == "count" {
					if tk.Label != formatCount(int64(tk.V)) {
						t.Fatalf("count tick %v labelled %q", tk.V, tk.Label)
					}
					continue
				}
				m := unit.FindStringSubmatch(tk.Label)
				if m == nil {
					t.Fatalf("duration tick %v ms labelled %q", tk.V, tk.Label)
				}
				units = append(units, m[2])
				// The label, read back, is the tick's value.
				n, err := strconv.ParseFloat(m[1], 64)
				if err != nil || math.Abs(n*unitMs[m[2]]-tk.V) > 1e-9*tk.V {
					t.Fatalf("duration tick %v ms labelled %q", tk.V, tk.Label)
				}
			}
			if len(slices.Compact(slices.Clone(ls))) != len(ls) {
				t.Fatalf("%s ticks for %v repeat a label: %q", kind, v, ls)
			}
			if len(slices.Compact(units)) > 1 {
				t.Fatalf("duration ticks for %v ms mix units: %q", v, ls)
			}
		}
	}
}

// A fresh queue's charts (an hour with nothing in it) are labelled
// "0, 1, 2" and "0, 1ms, 2ms", each label at its own height.
func TestEmptyChartsLabels(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	h := make([]admin.Minute, 60)
	for i := range h {
		h[i].Start = start.Add(time.Duration(i) * time.Minute)
	}
	c := historyCharts(h, "q", 560, 150)
	text := regexp.MustCompile(`<text class="axis" x="50" y="([0-9.]+)"[^>]*>([^<]*)</text>`)
	for svg, want := range map[string][]string{
		string(c.Handled.SVG()):  {"0", "1", "2"},
		string(c.Lateness.SVG()): {"0", "1ms", "2ms"},
	} {
		var got, ys []string
		for _, m := range text.FindAllStringSubmatch(svg, -1) {
			ys, got = append(ys, m[1]), append(got, m[2])
		}
		if !slices.Equal(got, want) || len(slices.Compact(slices.Clone(ys))) != len(ys) {
			t.Errorf("y labels %q at %q, want %q at three heights", got, ys, want)
		}
	}
}
