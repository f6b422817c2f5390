package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/admin"
)

// series is one named row of values of a chart, drawn with a CSS class.
type series struct {
	Name   string
	Class  string
	Values []float64
}

// chart is a server-rendered SVG chart over minutes: stacked bars or lines.
type chart struct {
	Label   string                   // accessible name
	Times   []time.Time              // start of each minute (x)
	Series  []series                 // in drawing (and stacking) order
	Bars    bool                     // stacked bars; lines otherwise
	Format  func(float64) string     // a value, in tooltips
	Ticks   func(max float64) []tick // the y axis for the largest value
	W, H    int                      // view box
	Compact bool                     // a sparkline: no axes or labels
	// Every: the x axis is labelled at the multiples of it (UTC); 15
	// minutes when zero.
	Every time.Duration
}

const (
	padLeft, padRight, padTop, padBottom = 56, 8, 10, 22
)

// SVG renders the chart. Every text in it goes through
// template.HTMLEscapeString; everything else is numbers.
func (c chart) SVG() template.HTML {
	var b strings.Builder
	esc := template.HTMLEscapeString
	left, right, top, bottom := padLeft, padRight, padTop, padBottom
	if c.Compact {
		left, right, top, bottom = 0, 0, 1, 0
	}
	pw, ph := float64(c.W-left-right), float64(c.H-top-bottom)
	n := len(c.Times)
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" preserveAspectRatio="none">`,
		c.W, c.H, c.W, c.H, esc(c.Label))
	if n == 0 {
		b.WriteString(`</svg>`)
		return template.HTML(b.String())
	}
	var ticks []tick
	ymax := niceCeil(c.max())
	if !c.Compact {
		ticks = c.Ticks(c.max())
		ymax = ticks[len(ticks)-1].V
	}
	y := func(v float64) float64 { return float64(top) + ph - v/ymax*ph }
	slot := pw / float64(n)
	x := func(i int) float64 { return float64(left) + float64(i)*slot }

	if !c.Compact {
		for _, tk := range ticks {
			fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, left, c.W-right, y(tk.V), y(tk.V))
			fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`, left-6, y(tk.V), esc(tk.Label))
		}
		every := c.Every
		if every <= 0 {
			every = 15 * time.Minute
		}
		for i, t := range c.Times {
			if t.UTC().Truncate(every).Equal(t.UTC()) {
				fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(i)+slot/2, c.H-6, t.UTC().Format("15:04"))
			}
		}
	}
	if c.Bars {
		for i, t := range c.Times {
			base := 0.0
			var tip []string
			for _, s := range c.Series {
				v := s.Values[i]
				tip = append(tip, fmt.Sprintf("%s %s", c.Format(v), s.Name))
				if v <= 0 {
					continue
				}
				fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`,
					esc(s.Class), x(i)+slot*0.1, y(base+v), slot*0.8, y(base)-y(base+v))
				base += v
			}
			if !c.Compact {
				// An invisible full-height column carries the tooltip.
				fmt.Fprintf(&b, `<rect class="hover" x="%.1f" y="%d" width="%.1f" height="%.0f"><title>%s — %s</title></rect>`,
					x(i), top, slot, ph, t.UTC().Format("15:04"), esc(strings.Join(tip, ", ")))
			}
		}
	} else {
		for _, s := range c.Series {
			// A NaN (no data for the minute) breaks the line; a lone point
			// is drawn as a short dash.
			type pt struct{ x, y float64 }
			var run []pt
			flush := func() {
				if len(run) == 1 {
					run = []pt{{run[0].x - slot/3, run[0].y}, {run[0].x + slot/3, run[0].y}}
				}
				if len(run) > 0 {
					fmt.Fprintf(&b, `<polyline class="%s" fill="none" points="`, esc(s.Class))
					for j, p := range run {
						if j > 0 {
							b.WriteByte(' ')
						}
						fmt.Fprintf(&b, "%.1f,%.1f", p.x, p.y)
					}
					b.WriteString(`"/>`)
				}
				run = run[:0]
			}
			for i, v := range s.Values {
				if math.IsNaN(v) {
					flush()
					continue
				}
				run = append(run, pt{x(i) + slot/2, y(v)})
			}
			flush()
		}
		if !c.Compact {
			for i, t := range c.Times {
				var tip []string
				for _, s := range c.Series {
					v := "—"
					if !math.IsNaN(s.Values[i]) {
						v = c.Format(s.Values[i])
					}
					tip = append(tip, fmt.Sprintf("%s %s", s.Name, v))
				}
				fmt.Fprintf(&b, `<rect class="hover" x="%.1f" y="%d" width="%.1f" height="%.0f"><title>%s — %s</title></rect>`,
					x(i), top, slot, ph, t.UTC().Format("15:04"), esc(strings.Join(tip, ", ")))
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// max is the largest bar (stacked) or point.
func (c chart) max() float64 {
	m := 0.0
	for i := range c.Times {
		sum := 0.0
		for _, s := range c.Series {
			switch v := s.Values[i]; {
			case math.IsNaN(v):
			case c.Bars:
				sum += v
			default:
				sum = math.Max(sum, v)
			}
		}
		m = math.Max(m, sum)
	}
	return m
}

// tick is a labelled value of a y axis.
type tick struct {
	V     float64
	Label string
}

// An axis has at least minIntervals and at most maxIntervals steps between
// its ticks, all of one size, from 0 to the first tick at or above the
// largest value: 3 to 5 labels, so that even an empty chart reads "0, 1, 2".
const minIntervals, maxIntervals = 2, 4

// steps chooses the smallest step of the sequence next(first),
// next(next(first)), … with which max fits in maxIntervals steps, and how
// many steps the axis has.
func steps(max, first float64, next func(float64) float64) (step float64, n int) {
	if math.IsNaN(max) || math.IsInf(max, 0) || max < 0 {
		max = 0
	}
	step = first
	for math.Ceil(max/step) > maxIntervals {
		step = next(step)
	}
	return step, int(math.Max(minIntervals, math.Ceil(max/step)))
}

// next125 is the step after s in 1, 2, 5, 10, 20, 50, …
func next125(s float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(s)+1e-9))
	switch m := math.Round(s / p); {
	case m < 2:
		return 2 * p
	case m < 5:
		return 5 * p
	default:
		return 10 * p
	}
}

// countTicks is the axis of a count: whole steps of 1, 2 or 5 times a power
// of ten ("0, 1, 2" for nothing; "0, 500, 1,000, 1,500" for 1,234).
func countTicks(max float64) []tick {
	step, n := steps(max, 1, next125)
	out := make([]tick, n+1)
	for i := range out {
		v := float64(i) * step
		out[i] = tick{v, formatCount(int64(v))}
	}
	return out
}

// durationSteps are the steps of a duration axis, in milliseconds, up to a
// day; beyond, days go in steps of 1, 2 or 5 times a power of ten.
var durationSteps = []float64{
	1, 2, 5, 10, 20, 50, 100, 200, 500, // ms
	1e3, 2e3, 5e3, 10e3, 15e3, 30e3, // s
	60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, // min
	3600e3, 7200e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, // h
	msPerDay,
}

const msPerDay = 24 * 3600e3

func nextDuration(s float64) float64 {
	for _, d := range durationSteps {
		if d > s {
			return d
		}
	}
	return next125(s/msPerDay) * msPerDay
}

// durationUnits are the units of a duration axis: the first whose limit is
// above the axis's step labels every tick, so that one axis never mixes
// units and its labels are whole numbers of it, or halves of a second
// ("0, 1ms, 2ms"; "0, 0.5s, 1s, 1.5s"; "0, 30s, 60s, 90s"; "0, 1m, 2m").
var durationUnits = []struct {
	ms, limit float64 // the unit, and the step it labels up to
	suffix    string
}{
	{1, 500, "ms"},
	{1e3, 60e3, "s"},
	{60e3, 3600e3, "m"},
	{3600e3, msPerDay, "h"},
	{msPerDay, math.Inf(1), "d"},
}

// durationTicks is the axis of a duration given in milliseconds.
func durationTicks(maxMs float64) []tick {
	step, n := steps(maxMs, 1, nextDuration)
	u := durationUnits[0]
	for _, u = range durationUnits {
		if step < u.limit {
			break
		}
	}
	out := make([]tick, n+1)
	for i := range out {
		v := float64(i) * step
		label := "0"
		if i > 0 {
			label = strconv.FormatFloat(v/u.ms, 'f', -1, 64) + u.suffix
		}
		out[i] = tick{v, label}
	}
	return out
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v <= 0);
// the scale of a sparkline.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func countLabel(v float64) string { return formatCount(int64(math.Round(v))) }

func msLabel(v float64) string { return formatDuration(time.Duration(v * float64(time.Millisecond))) }

// sumMinutes adds the histories of several queues minute by minute.
func sumMinutes(hs [][]admin.Minute) []admin.Minute {
	if len(hs) == 0 {
		return nil
	}
	out := make([]admin.Minute, len(hs[0]))
	for i := range out {
		out[i].Start = hs[0][i].Start
		for _, h := range hs {
			m := h[i]
			out[i].Claimed += m.Claimed
			out[i].Done += m.Done
			out[i].Failed += m.Failed
			out[i].Dead += m.Dead
			out[i].LatenessSum += m.LatenessSum
			out[i].LatenessMax = max(out[i].LatenessMax, m.LatenessMax)
		}
	}
	return out
}

// charts are the two charts of a history: outcomes per minute and lateness.
type charts struct {
	Handled, Lateness  chart
	Total              int64 // attempts ended over the span
	Done, Failed, Dead int64
	MaxLateness        time.Duration // over the span
	// Per and Over say what a bar is and what the charts cover, for the
	// captions: "per minute" and "in the last hour" unless a span says
	// otherwise.
	Per, Over string
}

// chartSpan is a window of the queue page's charts: how far back they go,
// how many minutes one bar or point sums, and where the axis is labelled.
type chartSpan struct {
	Name  string        // as in the URL: "1h" or "24h"
	Back  time.Duration // the first minute is Back before the current one
	Group int           // minutes per bar
	Every time.Duration // axis labels
	Per   string        // "per minute", "per 15 minutes"
	Over  string        // "in the last hour", ...
}

// chartSpans are the windows the queue page offers: the last hour by the
// minute, and the last 24 hours (as long as Redis keeps a queue's history:
// a day after its last write) by the quarter of an hour. A 24-hour page reads
// 1,440 minutes of one queue in one pipelined round trip.
var chartSpans = []chartSpan{
	{Name: "1h", Back: 59 * time.Minute, Group: 1, Every: 15 * time.Minute, Per: "per minute", Over: "in the last hour"},
	{Name: "24h", Back: 24*time.Hour - time.Minute, Group: 15, Every: 3 * time.Hour, Per: "per 15 minutes", Over: "in the last 24 hours"},
}

// spanOf is the chart span named name ("" is the first).
func spanOf(name string) (chartSpan, bool) {
	if name == "" {
		return chartSpans[0], true
	}
	for _, s := range chartSpans {
		if s.Name == name {
			return s, true
		}
	}
	return chartSpan{}, false
}

// groupMinutes sums every n minutes of h into one, from the first: counts
// and lateness sums add up, the lateness maximum is the largest.
func groupMinutes(h []admin.Minute, n int) []admin.Minute {
	if n <= 1 {
		return h
	}
	out := make([]admin.Minute, 0, (len(h)+n-1)/n)
	for i, m := range h {
		if i%n == 0 {
			out = append(out, admin.Minute{Start: m.Start})
		}
		g := &out[len(out)-1]
		g.Claimed += m.Claimed
		g.Done += m.Done
		g.Failed += m.Failed
		g.Dead += m.Dead
		g.RateHeld += m.RateHeld
		g.LatenessSum += m.LatenessSum
		g.LatenessMax = max(g.LatenessMax, m.LatenessMax)
	}
	return out
}

// charts draws the minutes h of the span: grouped, labelled for it.
func (s chartSpan) charts(h []admin.Minute, w, height int) charts {
	over := strings.TrimPrefix(s.Over, "in the ")
	c := historyCharts(groupMinutes(h, s.Group), over, w, height)
	c.Per, c.Over = s.Per, s.Over
	c.Handled.Label = "Jobs handled " + s.Per + ", " + over
	c.Lateness.Label = "Lateness (claim time − ready time) " + s.Per + ", " + over
	c.Handled.Every, c.Lateness.Every = s.Every, s.Every
	return c
}

func historyCharts(h []admin.Minute, label string, w, height int) charts {
	times := make([]time.Time, len(h))
	done, failed, dead := make([]float64, len(h)), make([]float64, len(h)), make([]float64, len(h))
	mean, peak := make([]float64, len(h)), make([]float64, len(h))
	var out charts
	for i, m := range h {
		times[i] = m.Start
		done[i], failed[i], dead[i] = float64(m.Done), float64(m.Failed), float64(m.Dead)
		mean[i], peak[i] = math.NaN(), math.NaN() // no claims: no lateness to draw
		if m.Claimed > 0 {
			mean[i] = float64(m.MeanLateness()) / float64(time.Millisecond)
			peak[i] = float64(m.LatenessMax) / float64(time.Millisecond)
		}
		out.Done += m.Done
		out.Failed += m.Failed
		out.Dead += m.Dead
		out.MaxLateness = max(out.MaxLateness, m.LatenessMax)
	}
	out.Total = out.Done + out.Failed + out.Dead
	out.Per, out.Over = "per minute", "in the last hour"
	out.Handled = chart{
		Label: "Jobs handled per minute, " + label, Times: times, Bars: true, Format: countLabel, Ticks: countTicks, W: w, H: height,
		Series: []series{{"done", "s-done", done}, {"failed", "s-failed", failed}, {"dead", "s-dead", dead}},
	}
	out.Lateness = chart{
		Label: "Lateness (claim time − ready time) per minute, " + label, Times: times, Format: msLabel, Ticks: durationTicks, W: w, H: height,
		Series: []series{{"max", "s-max", peak}, {"mean", "s-mean", mean}},
	}
	return out
}

// sparkline is a tiny bar chart of the attempts ended per minute.
func sparkline(h []admin.Minute, queue string) chart {
	times := make([]time.Time, len(h))
	vals := make([]float64, len(h))
	for i, m := range h {
		times[i], vals[i] = m.Start, float64(m.Handled())
	}
	return chart{Label: "Jobs handled per minute in " + queue, Times: times, Bars: true, Compact: true, Format: countLabel, W: 120, H: 24,
		Series: []series{{"handled", "s-done", vals}}}
}
