package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// latenessSeries is the pooled spread-workload lateness of one system at one
// concurrency, sorted ascending, in ms.
type latenessSeries struct {
	System      string
	Concurrency int
	Rounds      int
	Sorted      []float64
}

// spreadSeries pools the lateness of every spread run by system and
// concurrency, in the order of systems and concs.
func spreadSeries(runs []RunResult, systems []string, concs []int) []latenessSeries {
	var out []latenessSeries
	for _, c := range concs {
		for _, s := range systems {
			ls := latenessSeries{System: s, Concurrency: c}
			for i := range runs {
				r := &runs[i]
				if r.System == s && r.Concurrency == c && r.Workload == "spread" && r.Error == "" && len(r.lateness) > 0 {
					ls.Sorted = append(ls.Sorted, r.lateness...)
					ls.Rounds++
				}
			}
			if len(ls.Sorted) > 0 {
				sort.Float64s(ls.Sorted)
				out = append(out, ls)
			}
		}
	}
	return out
}

var svgColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// svg layout, in px.
const (
	svgWidth    = 760
	svgPanelH   = 330
	svgLeft     = 70
	svgRight    = 20
	svgTop      = 40
	svgBottom   = 45
	svgMinMs    = 0.01 // left edge of the x axis; earlier or on-time jobs sit there
	svgGridStep = 1    // decades between x grid lines
)

// writeLatenessSVG draws, for each concurrency, the complementary CDF of
// spread lateness per system on log-log axes: y is the fraction of jobs
// that started more than x ms late, so p50 is where a curve crosses 0.5 and
// p99 where it crosses 0.01; the curve's end is the maximum.
func writeLatenessSVG(path string, series []latenessSeries, n int, title string) error {
	if len(series) == 0 {
		return fmt.Errorf("svg: no spread runs to draw")
	}
	var concs []int
	for _, s := range series {
		if len(concs) == 0 || concs[len(concs)-1] != s.Concurrency {
			concs = append(concs, s.Concurrency)
		}
	}
	perPanel := map[int]int{}
	for _, s := range series {
		perPanel[s.Concurrency]++
	}
	maxLegend := 0
	for _, k := range perPanel {
		maxLegend = max(maxLegend, k)
	}
	panelH := svgPanelH + svgBottom + 16*maxLegend + 10
	var b strings.Builder
	height := svgTop + len(concs)*panelH
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, xmlEscape(title))

	// Shared axes over all panels so that they compare at a glance.
	maxMs := 100.0
	minFrac := 1.0
	for _, s := range series {
		maxMs = math.Max(maxMs, s.Sorted[len(s.Sorted)-1])
		minFrac = math.Min(minFrac, 1/float64(len(s.Sorted)))
	}
	x0, x1 := math.Log10(svgMinMs), math.Ceil(math.Log10(maxMs*1.01))
	y1 := math.Floor(math.Log10(minFrac)) // bottom decade

	colorOf := map[string]string{}
	for _, s := range series {
		if _, ok := colorOf[s.System]; !ok {
			colorOf[s.System] = svgColors[len(colorOf)%len(svgColors)]
		}
	}
	for pi, c := range concs {
		top := float64(svgTop + pi*panelH)
		pw, ph := float64(svgWidth-svgLeft-svgRight), float64(svgPanelH-30)
		left := float64(svgLeft)
		px := func(ms float64) float64 {
			l := math.Log10(math.Max(ms, svgMinMs))
			return left + (l-x0)/(x1-x0)*pw
		}
		py := func(frac float64) float64 { return top + 20 + (0-math.Log10(frac))/(0-y1)*ph }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">spread, concurrency %d, n=%d per round</text>`+"\n", left, top+12, c, n)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", left, top+20, pw, ph)
		for d := x0; d <= x1+1e-9; d += svgGridStep {
			x := left + (d-x0)/(x1-x0)*pw
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, top+20, x, top+20+ph)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+20+ph+15, msLabel(math.Pow(10, d)))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">lateness (ms, log; ≤ %s ms and negative values at the left edge)</text>`+"\n", left+pw/2, top+20+ph+32, msLabel(svgMinMs))
		for d := 0.0; d >= y1-1e-9; d-- {
			if d < 0 && d > y1 && y1 < -5 && int(d)%2 != 0 {
				continue // label every other decade when there are many
			}
			y := py(math.Pow(10, d))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+pw, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-5, y+4, fracLabel(d))
		}
		for _, q := range []struct {
			frac  float64
			label string
		}{{0.5, "p50"}, {0.01, "p99"}} {
			y := py(q.frac)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", left, y, left+pw, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#666">%s</text>`+"\n", left+pw-4, y-3, q.label)
		}
		fmt.Fprintf(&b, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">fraction of jobs later than x</text>`+"\n", left-52, top+20+ph/2)

		legendY := top + 20 + ph + 52
		for _, s := range series {
			if s.Concurrency != c {
				continue
			}
			col := colorOf[s.System]
			var pts []string
			total := float64(len(s.Sorted))
			steps := 400
			for i := 0; i <= steps; i++ {
				ms := math.Pow(10, x0+(x1-x0)*float64(i)/float64(steps))
				later := len(s.Sorted) - sort.Search(len(s.Sorted), func(k int) bool { return s.Sorted[k] > ms })
				if later == 0 {
					break
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(ms), py(float64(later)/total)))
			}
			mx := s.Sorted[len(s.Sorted)-1]
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(mx), py(1/total)))
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", px(mx), py(1/total), col)
			// Negative lateness: the handler started before the later of the
			// ready time and the enqueue's return (for delayq, usually
			// before the producer's call had returned); starts before the
			// ready time itself are the report's "early" column.
			negative := sort.Search(len(s.Sorted), func(k int) bool { return s.Sorted[k] >= 0 })
			label := fmt.Sprintf("%s: p50 %s  p99 %s  max %s ms, negative %.1f%% (%d round(s))", s.System,
				fmtMs(percentile(s.Sorted, 50)), fmtMs(percentile(s.Sorted, 99)), fmtMs(mx), 100*float64(negative)/total, s.Rounds)
			lx := left
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, legendY-4, lx+18, legendY-4, col)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11">%s</text>`+"\n", lx+24, legendY, xmlEscape(label))
			legendY += 16
		}
	}
	b.WriteString("</svg>\n")
	return writeFileAtomic(path, b.String())
}

func writeFileAtomic(path, content string) error {
	f, err := os.CreateTemp(dirOf(path), ".svg-*")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, content); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}

func msLabel(ms float64) string {
	switch {
	case ms >= 1000:
		return strconv.FormatFloat(ms/1000, 'f', -1, 64) + " s"
	default:
		return strconv.FormatFloat(ms, 'f', -1, 64)
	}
}

func fracLabel(decade float64) string {
	switch decade {
	case 0:
		return "1"
	case -1:
		return "0.1"
	case -2:
		return "0.01"
	}
	return "1e" + strconv.Itoa(int(decade))
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
