package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// The -table output: issue #38's comparison as one markdown table, every
// cell the median [min–max] over rounds, and the subject's ratio to a
// reference system computed within each round (the systems of a round run
// interleaved, so machine drift hits them alike) and then summarized.

// tableRow is one row of the comparison table.
type tableRow struct {
	label  string
	format tableFormat
	higher bool   // a higher value is better
	ref    string // reference system for the ratio; "" or absent: the best other system
	// value returns one system's figure in one round.
	value func(sys string, round int) (float64, bool)
}

// A table format gives a number and its unit; a cell shows the unit once,
// after the median: "46.0 k/s [44.5–47.5]".
type tableFormat struct {
	num  func(float64) string
	unit string
}

var (
	fmtRate   = tableFormat{func(v float64) string { return strconv.FormatFloat(v/1000, 'f', 1, 64) }, " k/s"}
	fmtBytes  = tableFormat{fmtInt, " B"}
	fmtUs     = tableFormat{func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }, " µs"}
	fmtReq    = tableFormat{func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }, ""}
	fmtAllocs = tableFormat{func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }, ""}
	fmtMsUnit = tableFormat{fmtMs, " ms"}
)

// tcell is "median unit [min–max]", or "median unit" when the range is
// one value.
func tcell(s Summary, f tableFormat) string {
	out := f.num(s.Median) + f.unit
	if s.N > 1 && s.Min != s.Max {
		out += " [" + f.num(s.Min) + "–" + f.num(s.Max) + "]"
	}
	return out
}

// runFigures finds the figures of one successful run.
func runFigures(rep *Report, sys, workload string, conc, round int) *Figures {
	for i := range rep.Runs {
		r := &rep.Runs[i]
		if r.System == sys && r.Workload == workload && r.Concurrency == conc && r.Round == round && r.Error == "" {
			return &r.Figures
		}
	}
	return nil
}

func runValue(rep *Report, workload string, conc int, get func(*Figures) (float64, bool)) func(string, int) (float64, bool) {
	return func(sys string, round int) (float64, bool) {
		f := runFigures(rep, sys, workload, conc, round)
		if f == nil {
			return 0, false
		}
		return get(f)
	}
}

// burstRedisCPU is the burst's Redis CPU per job: enqueue (per job stored)
// plus drain window (per job handled), in µs.
func burstRedisCPU(f *Figures) (float64, bool) {
	if f.EnqueueRedisCPUUsPerJob == nil || f.RedisCPUSecPer100k == nil {
		return 0, false
	}
	return *f.EnqueueRedisCPUUsPerJob + *f.RedisCPUSecPer100k*10, true // s/100k → µs/job
}

// burstRequests is the burst's Redis requests per job, enqueue plus drain.
func burstRequests(f *Figures) (float64, bool) {
	if f.EnqueueRedis == nil || f.WindowRedis == nil {
		return 0, false
	}
	return f.EnqueueRedis.RequestsPerJob + f.WindowRedis.RequestsPerJob, true
}

func hasRuns(rep *Report, workload string, conc int) bool {
	for _, r := range rep.Runs {
		if r.Workload == workload && r.Concurrency == conc {
			return true
		}
	}
	return false
}

// comparisonRows builds the rows of issue #38's table that the runs of rep
// can fill.
func comparisonRows(rep *Report) []tableRow {
	var rows []tableRow
	add := func(workload string, conc int, r tableRow, get func(*Figures) (float64, bool)) {
		if !hasRuns(rep, workload, conc) {
			return
		}
		r.value = runValue(rep, workload, conc, get)
		rows = append(rows, r)
	}
	concs := rep.Config.Concurrency
	for _, c := range concs {
		add("burst", c, tableRow{label: fmt.Sprintf("burst drain, concurrency %d", c), format: fmtRate, higher: true, ref: "bareloop"},
			func(f *Figures) (float64, bool) { return f.DrainPerSec, f.Handled > 0 })
	}
	for _, w := range []string{"spread", "burst"} {
		for _, c := range concs {
			add(w, c, tableRow{label: fmt.Sprintf("single enqueue, %s, c=%d", w, c), format: fmtRate, higher: true, ref: "asynq"},
				func(f *Figures) (float64, bool) { return f.EnqueuePerSec, f.Enqueued > 0 })
		}
	}
	if len(rep.Memory) > 0 {
		rows = append(rows, tableRow{label: "Redis memory per queued job", format: fmtBytes, ref: "bareloop",
			value: func(sys string, round int) (float64, bool) {
				for _, m := range rep.Memory {
					if m.System == sys && m.Round == round && m.Error == "" {
						return m.BytesPerJob, true
					}
				}
				return 0, false
			}})
	}
	for _, c := range concs {
		add("burst", c, tableRow{label: fmt.Sprintf("Redis CPU per job, enqueue + drain, burst c=%d", c), format: fmtUs, ref: "bareloop"}, burstRedisCPU)
	}
	for _, c := range concs {
		add("burst", c, tableRow{label: fmt.Sprintf("Redis requests per job, enqueue + drain, burst c=%d", c), format: fmtReq, ref: "bareloop"}, burstRequests)
	}
	for _, c := range concs {
		add("burst", c, tableRow{label: fmt.Sprintf("client bytes allocated per drained job, burst c=%d", c), format: fmtBytes, ref: "bareloop"},
			func(f *Figures) (float64, bool) { return optional(f.WindowBytesPerJob) })
		add("burst", c, tableRow{label: fmt.Sprintf("client allocations per drained job, burst c=%d", c), format: fmtAllocs, ref: "bareloop"},
			func(f *Figures) (float64, bool) { return optional(f.WindowAllocsPerJob) })
	}
	for _, c := range concs {
		add("burst", c, tableRow{label: fmt.Sprintf("client bytes allocated per enqueued job, burst c=%d", c), format: fmtBytes, ref: "asynq"},
			func(f *Figures) (float64, bool) { return optional(f.EnqueueBytesPerJob) })
		add("burst", c, tableRow{label: fmt.Sprintf("client allocations per enqueued job, burst c=%d", c), format: fmtAllocs, ref: "asynq"},
			func(f *Figures) (float64, bool) { return optional(f.EnqueueAllocsPerJob) })
	}
	for _, c := range concs {
		add("spread", c, tableRow{label: fmt.Sprintf("p99 lateness, spread, c=%d", c), format: fmtMsUnit},
			func(f *Figures) (float64, bool) { return optional(f.LatenessP99Ms) })
	}
	return rows
}

// ratioCell summarizes subject/ref over the rounds both have a value in.
func ratioCell(rep *Report, r tableRow, subject, ref string) string {
	var xs []float64
	for round := 1; round <= rep.Config.Rounds; round++ {
		a, ok1 := r.value(subject, round)
		b, ok2 := r.value(ref, round)
		if ok1 && ok2 && b != 0 {
			xs = append(xs, a/b)
		}
	}
	s, ok := summarize(xs)
	if !ok {
		return "n/a"
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	out := f(s.Median) + "× " + ref
	if s.N > 1 && s.Min != s.Max {
		out += " [" + f(s.Min) + "–" + f(s.Max) + "]"
	}
	return out
}

func rowSummary(rep *Report, r tableRow, sys string) (Summary, bool) {
	var xs []float64
	for round := 1; round <= rep.Config.Rounds; round++ {
		if v, ok := r.value(sys, round); ok {
			xs = append(xs, v)
		}
	}
	return summarize(xs)
}

// chooseRef returns r.ref if it ran (and is not the subject), else the
// other system with the best median; "" if there is none.
func chooseRef(rep *Report, r tableRow, systems []string, subject string) string {
	if r.ref != "" && r.ref != subject {
		if _, ok := rowSummary(rep, r, r.ref); ok {
			return r.ref
		}
	}
	best, bestV := "", math.NaN()
	for _, s := range systems {
		if s == subject {
			continue
		}
		sm, ok := rowSummary(rep, r, s)
		if !ok {
			continue
		}
		if best == "" || (r.higher && sm.Median > bestV) || (!r.higher && sm.Median < bestV) {
			best, bestV = s, sm.Median
		}
	}
	return best
}

// writeMarkdownTable writes the comparison of rep as markdown: a header
// naming the run, the comparison table, the correctness counts and, if the
// backlog workload ran, the backlog table.
//
// rev names the measured commit (gitRevision, read when the run started).
func writeMarkdownTable(w io.Writer, rep *Report, systems []string, subject string, args []string, rev, loadStart, loadEnd string) {
	c := rep.Config
	pmin, pmax := math.MaxInt, 0
	for i := 0; i < c.N; i++ {
		l := len(makePayload(i))
		pmin, pmax = min(pmin, l), max(pmax, l)
	}
	rounds := fmt.Sprintf("%d rounds (systems interleaved within each round)", c.Rounds)
	if c.Rounds == 1 {
		rounds = "1 round"
	}
	fmt.Fprintf(w, "Run of %s–%s UTC: n = %d jobs, %d producers, %s, payloads of %d–%d B; %s, %d CPUs, GOMAXPROCS %d, Redis %s; delayq at %s; load average (1, 5, 15 min) %s at the start, %s at the end.\n\n",
		rep.StartedAt.UTC().Format("2006-01-02 15:04"), rep.FinishedAt.UTC().Format("15:04"), c.N, c.Producers, rounds,
		pmin, pmax, rep.Host.GoVersion, rep.Host.NumCPU, rep.Host.GOMAXPROCS, rep.Host.RedisVersion,
		rev, loadStart, loadEnd)
	fmt.Fprintf(w, "```sh\ngo run . %s\n```\n\n", strings.Join(args, " "))
	if rep.Interrupted {
		fmt.Fprint(w, "**Interrupted**: only the runs that finished are counted.\n\n")
	}

	hasSubject := false
	for _, s := range systems {
		hasSubject = hasSubject || s == subject
	}
	hdr := "| |"
	sep := "|---|"
	for _, s := range systems {
		hdr += " " + s + " |"
		sep += "---|"
	}
	if hasSubject {
		hdr += " " + subject + " / ref |"
		sep += "---|"
	}
	fmt.Fprintln(w, hdr)
	fmt.Fprintln(w, sep)
	for _, r := range comparisonRows(rep) {
		line := "| " + r.label + " |"
		for _, s := range systems {
			if sm, ok := rowSummary(rep, r, s); ok {
				line += " " + tcell(sm, r.format) + " |"
			} else {
				line += " n/a |"
			}
		}
		if hasSubject {
			if ref := chooseRef(rep, r, systems, subject); ref != "" {
				line += " " + ratioCell(rep, r, subject, ref) + " |"
			} else {
				line += " n/a |"
			}
		}
		fmt.Fprintln(w, line)
	}
	// Correctness: totals over every run, the backlog's included.
	line := "| early / lost / duplicated jobs, all runs |"
	for _, s := range systems {
		var early, lost, dup, errs int
		for _, r := range rep.Runs {
			if r.System != s {
				continue
			}
			if r.Error != "" {
				errs++
				continue
			}
			early += r.Figures.Early
			lost += r.Figures.Lost
			dup += r.Figures.Duplicates
		}
		cellText := fmt.Sprintf("%d / %d / %d", early, lost, dup)
		if errs > 0 {
			cellText += fmt.Sprintf(" (%d runs failed)", errs)
		}
		line += " " + cellText + " |"
	}
	if hasSubject {
		line += " |"
	}
	fmt.Fprintln(w, line)

	writeBacklogTable(w, rep, systems)
}

// writeBacklogTable compares each backlog=B run with the same system's
// backlog=0 run of the same round.
func writeBacklogTable(w io.Writer, rep *Report, systems []string) {
	b := rep.Config.Backlog
	full, empty := fmt.Sprintf("backlog=%d", b), "backlog=0"
	if b == 0 || !hasAnyWorkload(rep, full) || !hasAnyWorkload(rep, empty) {
		return
	}
	fmt.Fprintf(w, "\nBacklog: %d jobs scheduled over the next hour (bulk loaded, not timed), then %d jobs due at once enqueued by %d producers with consumers running; the same with an empty queue; ratio = backlog / empty within each round.\n\n", b, rep.Config.N, rep.Config.Producers)
	fmt.Fprintln(w, "| system | conc | figure | backlog | empty | backlog / empty |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	figs := []struct {
		label  string
		format tableFormat
		get    func(*Figures) (float64, bool)
	}{
		{"single enqueue", fmtRate, func(f *Figures) (float64, bool) { return f.EnqueuePerSec, f.Enqueued > 0 }},
		{"drain", fmtRate, func(f *Figures) (float64, bool) { return f.DrainPerSec, f.Handled > 0 }},
		{"p99 lateness", fmtMsUnit, func(f *Figures) (float64, bool) { return optional(f.LatenessP99Ms) }},
		{"Redis CPU per job (window)", fmtUs, func(f *Figures) (float64, bool) {
			if f.RedisCPUSecPer100k == nil {
				return 0, false
			}
			return *f.RedisCPUSecPer100k * 10, true
		}},
	}
	for _, s := range systems {
		for _, c := range rep.Config.Concurrency {
			if !hasRuns(rep, full, c) {
				continue
			}
			for _, fg := range figs {
				bv := tableRow{value: runValue(rep, full, c, fg.get)}
				ev := tableRow{value: runValue(rep, empty, c, fg.get)}
				bs, ok1 := rowSummary(rep, bv, s)
				es, ok2 := rowSummary(rep, ev, s)
				if !ok1 && !ok2 {
					continue
				}
				var xs []float64
				for round := 1; round <= rep.Config.Rounds; round++ {
					x, ok1 := bv.value(s, round)
					y, ok2 := ev.value(s, round)
					if ok1 && ok2 && y != 0 {
						xs = append(xs, x/y)
					}
				}
				ratio := "n/a"
				if rs, ok := summarize(xs); ok {
					ratio = tcell(rs, tableFormat{func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }, "×"})
				}
				fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", s, c, fg.label, cellOr(bs, ok1, fg.format), cellOr(es, ok2, fg.format), ratio)
			}
			mem := tableRow{value: runValue(rep, full, c, func(f *Figures) (float64, bool) { return optional(f.BacklogBytesPerJob) })}
			if ms, ok := rowSummary(rep, mem, s); ok {
				fmt.Fprintf(w, "| %s | %d | used_memory per backlog job | %s | | |\n", s, c, tcell(ms, fmtBytes))
			}
		}
	}
}

func cellOr(s Summary, ok bool, format tableFormat) string {
	if !ok {
		return "n/a"
	}
	return tcell(s, format)
}

func hasAnyWorkload(rep *Report, workload string) bool {
	for _, r := range rep.Runs {
		if r.Workload == workload {
			return true
		}
	}
	return false
}

// gitRevision names the commit of the working tree the harness measures,
// with "+uncommitted changes" if it has any.
func gitRevision() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "an unknown commit"
	}
	rev := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev += " +uncommitted changes"
	}
	return rev
}

// loadAverage returns /proc/loadavg's three load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return f[0] + " " + f[1] + " " + f[2]
}
