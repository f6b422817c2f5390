// Command bench compares delayed-job systems on Redis: enqueue rate, drain
// rate, lateness, early starts, duplicates, lost jobs, Redis memory per job
// and worker CPU. See README.md.
package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

var stderr io.Writer = os.Stderr

func main() {
	if os.Getenv(rlWorkerEnv) != "" {
		os.Exit(rateLimitWorker())
	}
	os.Exit(run())
}

// Report is what -json writes.
type Report struct {
	StartedAt     time.Time          `json:"started_at"`
	FinishedAt    time.Time          `json:"finished_at"`
	Interrupted   bool               `json:"interrupted,omitempty"`
	Config        reportConfig       `json:"config"`
	Host          reportHost         `json:"host"`
	Runs          []RunResult        `json:"runs"`
	Memory        []MemoryResult     `json:"memory"`
	Summary       []SummaryRow       `json:"summary"`
	MemorySummary map[string]Summary `json:"memory_summary"`
}

type reportConfig struct {
	Systems     []string `json:"systems"`
	Workloads   []string `json:"workloads"`
	N           int      `json:"n"`
	Backlog     int      `json:"backlog"`
	Concurrency []int    `json:"concurrency"`
	Rounds      int      `json:"rounds"`
	Producers   int      `json:"producers"`
	BatchSize   int      `json:"batch_size"`
	LostTimeout string   `json:"lost_timeout"`
	Settle      string   `json:"settle"`
	RedisURL    string   `json:"redis_url"`
}

type reportHost struct {
	GoVersion    string `json:"go_version"`
	NumCPU       int    `json:"num_cpu"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	RedisVersion string `json:"redis_version"`
}

// SummaryRow is the median [min–max] over rounds of every figure of one
// system × workload × concurrency; a null metric is n/a.
type SummaryRow struct {
	System      string              `json:"system"`
	Workload    string              `json:"workload"`
	Concurrency int                 `json:"concurrency"`
	Rounds      int                 `json:"rounds"`
	Errors      []string            `json:"errors,omitempty"`
	Metrics     map[string]*Summary `json:"metrics"`
}

type metric struct {
	key, header string
	table       int // 1 = throughput and cost, 2 = timing and correctness
	format      func(float64) string
	get         func(f *Figures) (float64, bool)
}

func always(v float64) (float64, bool) { return v, true }

func optional[T int | float64](p *T) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return float64(*p), true
}

func fmtInt(v float64) string    { return strconv.FormatFloat(v, 'f', 0, 64) }
func fmtPerJob(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func redisFig(d *redisDelta, get func(*redisDelta) float64) (float64, bool) {
	if d == nil {
		return 0, false
	}
	return get(d), true
}

func fmtCPU(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func fmtMs(v float64) string {
	switch a := math.Abs(v); {
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

var metrics = []metric{
	{"enqueue_per_s", "enq/s", 1, fmtInt, func(f *Figures) (float64, bool) { return always(f.EnqueuePerSec) }},
	{"enqueue_batch_per_s", "batch enq/s", 1, fmtInt, func(f *Figures) (float64, bool) { return optional(f.EnqueueBatchPerSec) }},
	{"drain_per_s", "drain/s", 1, fmtInt, func(f *Figures) (float64, bool) { return always(f.DrainPerSec) }},
	{"cpu_s_per_100k", "cpu s/100k", 1, fmtCPU, func(f *Figures) (float64, bool) { return always(f.CPUSecPer100k) }},
	{"redis_cpu_s_per_100k", "redis cpu s/100k", 1, fmtCPU, func(f *Figures) (float64, bool) { return optional(f.RedisCPUSecPer100k) }},
	{"lateness_p50_ms", "late p50 ms", 2, fmtMs, func(f *Figures) (float64, bool) { return optional(f.LatenessP50Ms) }},
	{"lateness_p99_ms", "late p99 ms", 2, fmtMs, func(f *Figures) (float64, bool) { return optional(f.LatenessP99Ms) }},
	{"lateness_max_ms", "late max ms", 2, fmtMs, func(f *Figures) (float64, bool) { return optional(f.LatenessMaxMs) }},
	{"early", "early", 2, fmtInt, func(f *Figures) (float64, bool) { return always(float64(f.Early)) }},
	{"early_over_1ms", "early>1ms", 2, fmtInt, func(f *Figures) (float64, bool) { return always(float64(f.EarlyOver1ms)) }},
	{"enqueued_after_ready", "enq>ready", 2, fmtInt, func(f *Figures) (float64, bool) { return optional(f.EnqueuedAfterReady) }},
	{"enqueue_requests_per_job", "enq req/job", 3, fmtPerJob, func(f *Figures) (float64, bool) {
		return redisFig(f.EnqueueRedis, func(d *redisDelta) float64 { return d.RequestsPerJob })
	}},
	{"enqueue_commands_per_job", "enq cmds/job", 3, fmtPerJob, func(f *Figures) (float64, bool) {
		return redisFig(f.EnqueueRedis, func(d *redisDelta) float64 { return d.CommandsPerJob })
	}},
	{"window_requests_per_job", "drain req/job", 3, fmtPerJob, func(f *Figures) (float64, bool) {
		return redisFig(f.WindowRedis, func(d *redisDelta) float64 { return d.RequestsPerJob })
	}},
	{"window_scripts_per_job", "drain scripts/job", 3, fmtPerJob, func(f *Figures) (float64, bool) {
		return redisFig(f.WindowRedis, func(d *redisDelta) float64 { return d.ScriptsPerJob })
	}},
	{"window_commands_per_job", "drain cmds/job", 3, fmtPerJob, func(f *Figures) (float64, bool) {
		return redisFig(f.WindowRedis, func(d *redisDelta) float64 { return d.CommandsPerJob })
	}},
	{"enqueue_redis_cpu_us_per_job", "enq redis µs/job", 3, fmtCPU, func(f *Figures) (float64, bool) { return optional(f.EnqueueRedisCPUUsPerJob) }},
	{"enqueue_allocs_per_job", "enq allocs/job", 4, fmtCPU, func(f *Figures) (float64, bool) { return optional(f.EnqueueAllocsPerJob) }},
	{"enqueue_alloc_bytes_per_job", "enq B/job", 4, fmtInt, func(f *Figures) (float64, bool) { return optional(f.EnqueueBytesPerJob) }},
	{"window_allocs_per_job", "drain allocs/job", 4, fmtCPU, func(f *Figures) (float64, bool) { return optional(f.WindowAllocsPerJob) }},
	{"window_alloc_bytes_per_job", "drain B/job", 4, fmtInt, func(f *Figures) (float64, bool) { return optional(f.WindowBytesPerJob) }},
	{"backlog_bytes_per_job", "backlog B/job", 1, fmtInt, func(f *Figures) (float64, bool) { return optional(f.BacklogBytesPerJob) }},
	{"duplicates", "dup", 2, fmtInt, func(f *Figures) (float64, bool) { return always(float64(f.Duplicates)) }},
	{"lost", "lost", 2, fmtInt, func(f *Figures) (float64, bool) { return always(float64(f.Lost)) }},
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		v, err := strconv.Atoi(p)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad positive integer %q", p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func run() int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var (
		systemsFlag   = fs.String("systems", strings.Join(defaultSystems(), ","), "comma-separated systems (known: "+strings.Join(knownSystems(), ", ")+")")
		workloadsFlag = fs.String("workloads", "spread,burst,backlog", "comma-separated workloads: spread, burst, backlog")
		n             = fs.Int("n", 100000, "jobs per run")
		concFlag      = fs.String("concurrency", "10,100", "comma-separated consumer concurrencies")
		rounds        = fs.Int("rounds", 3, "rounds; systems run interleaved within each round")
		backlog       = fs.Int("backlog", 1000000, "jobs scheduled an hour ahead for the backlog workload")
		producers     = fs.Int("producers", 8, "producer goroutines for enqueueing")
		batchSize     = fs.Int("batch-size", 100, "jobs per EnqueueBatch call for the batch enqueue rate")
		lostTimeout   = fs.Duration("lost-timeout", 30*time.Second, "a job not handled this long after its ready time (and once handling stalls) is lost")
		settle        = fs.Duration("settle", 500*time.Millisecond, "wait after the last job before stopping consumers, to catch duplicates")
		jsonOut       = fs.String("json", "", "write raw per-round figures and medians to this file")
		csvOut        = fs.String("lateness-csv", "", "write per-job times of the spread workload (first round) to this file")
		svgOut        = fs.String("svg", "", "draw the spread lateness distribution of every system (all rounds pooled) as an SVG to this file")
		redisBin      = fs.String("redis-server", "redis-server", "redis-server binary, when REDIS_URL is not set")
		skipMemory    = fs.Bool("skip-memory", false, "skip the Redis memory-per-job measurement")
		tableOut      = fs.String("table", "", "write the comparison of issue #38 as a markdown table to this file (see README.md)")
		tableSubject  = fs.String("table-subject", "delayq", "-table: the system whose ratio to a reference system the last column gives")
		cpuProfile    = fs.String("cpuprofile", "", "write a CPU profile of the harness process (all systems' clients and workers) to this file")
		rateLimitN    = fs.Int("ratelimit", 0, "instead of the comparison: the rate-limit run with this many jobs due at once (see README.md)")
		rate          = fs.Int("rate", 200, "rate-limit run: the limit, jobs per second across all workers")
		rateBurst     = fs.Int("rate-burst", 20, "rate-limit run: the limit's burst")
		procs         = fs.Int("procs", 3, "rate-limit run: worker processes")
		procConc      = fs.Int("proc-concurrency", 10, "rate-limit run: concurrency of each worker process")
		rateOn        = fs.String("rate-on", "type", "rate-limit run: comma-separated placements of the limit, run interleaved each round: type, queue")
		rateStrict    = fs.Bool("rate-strict", false, "rate-limit run: a strict window of -rate in any second (RateLimit.Strict) instead of GCRA; -rate-burst is ignored")
		rateSlack     = fs.Duration("rate-slack", 0, "rate-limit run: the strict window's slack (RateLimit.Slack)")
		fairN         = fs.Int("fairness", 0, "instead of the comparison: the fairness run, key A flooding this many jobs due at once (see README.md)")
		fairEvery     = fs.Duration("fair-every", 100*time.Millisecond, "fairness run: how often key B enqueues a job")
		fairDuration  = fs.Duration("fair-duration", 30*time.Second, "fairness run: how long key B enqueues")
	)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "bench: "+format+"\n", a...)
		return 2
	}
	systems, err := lookupSystems(*systemsFlag)
	if err != nil {
		return fail("%v", err)
	}
	workloads, err := expandWorkloads(*workloadsFlag, *backlog)
	if err != nil {
		return fail("%v", err)
	}
	concs, err := parseInts(*concFlag)
	if err != nil {
		return fail("-concurrency: %v", err)
	}
	if *n <= 0 || *rounds <= 0 || *producers <= 0 || *batchSize <= 0 || *backlog < 0 {
		return fail("-n, -rounds, -producers and -batch-size must be positive, -backlog not negative")
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fail("cpuprofile: %v", err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	go func() {
		// After the first signal, a second one kills the process at once
		// (redis-server dies with it through Pdeathsig).
		<-ctx.Done()
		stopSignals()
	}()

	url := os.Getenv("REDIS_URL")
	if url == "" {
		srv, err := startRedisServer(*redisBin)
		if err != nil {
			return fail("%v", err)
		}
		defer srv.Stop()
		url = srv.URL
		fmt.Fprintf(stderr, "bench: started redis-server at %s\n", url)
	} else {
		fmt.Fprintf(stderr, "bench: using REDIS_URL=%s; it is FLUSHALLed between runs\n", url)
	}
	admin, err := newRedisAdmin(url)
	if err != nil {
		return fail("%v", err)
	}
	defer admin.Close()
	defer admin.FlushAll(context.Background())
	if *fairN > 0 {
		if *procs <= 0 || *procConc <= 0 || *fairEvery <= 0 || *fairDuration < *fairEvery {
			return fail("-procs, -proc-concurrency and -fair-every must be positive, -fair-duration at least -fair-every")
		}
		c := fairConfig{N: *fairN, Procs: *procs, Concurrency: *procConc, Every: *fairEvery, Duration: *fairDuration,
			Timeout: *fairDuration + *lostTimeout + time.Duration(*fairN/1000)*time.Second}
		res := map[string][]fairResult{}
		for round := 1; round <= *rounds; round++ {
			fmt.Fprintf(os.Stdout, "round %d:\n", round)
			for _, m := range fairModes {
				r, err := runFairness(ctx, url, admin, c, m)
				if err != nil {
					return fail("%v", err)
				}
				printFairness(os.Stdout, r)
				res[m] = append(res[m], r)
			}
		}
		printFairnessMedians(os.Stdout, c, res)
		return 0
	}
	if *rateLimitN > 0 {
		if *rate <= 0 || *rateBurst <= 0 || *procs <= 0 || *procConc <= 0 {
			return fail("-rate, -rate-burst, -procs and -proc-concurrency must be positive")
		}
		on := strings.Split(*rateOn, ",")
		for _, o := range on {
			if o != "type" && o != "queue" {
				return fail("-rate-on: %q is neither type nor queue", o)
			}
		}
		res := map[string][]rlResult{}
		for round := 1; round <= *rounds; round++ {
			for _, o := range on {
				c := rateLimitConfig{N: *rateLimitN, Rate: *rate, Burst: *rateBurst, Procs: *procs, Concurrency: *procConc,
					Timeout: time.Duration(*rateLimitN / *rate)*time.Second*2 + *lostTimeout, On: o, Strict: *rateStrict, Slack: *rateSlack}
				if *rateStrict {
					c.Burst = 0
				}
				fmt.Fprintf(os.Stdout, "round %d, limit on the %s:\n", round, o)
				r, err := runRateLimit(ctx, url, admin, c, os.Stdout)
				if err != nil {
					return fail("%v", err)
				}
				res[o] = append(res[o], r)
			}
		}
		printRateLimitMedians(os.Stdout, on, res)
		return 0
	}

	cfg := benchConfig{URL: url, N: *n, Producers: *producers, BatchSize: *batchSize, LostTimeout: *lostTimeout, Settle: *settle}
	rep := &Report{
		StartedAt: time.Now(),
		Runs:      []RunResult{},
		Memory:    []MemoryResult{},
		Config: reportConfig{Systems: systems, N: *n, Backlog: *backlog, Concurrency: concs, Rounds: *rounds,
			Producers: *producers, BatchSize: *batchSize, LostTimeout: lostTimeout.String(), Settle: settle.String(), RedisURL: url},
		Host: reportHost{GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), RedisVersion: admin.Version(ctx)},
	}
	for _, w := range workloads {
		rep.Config.Workloads = append(rep.Config.Workloads, w.Label())
	}

	loadStart, rev := loadAverage(), gitRevision()
	runNo := 0
	total := len(workloads) * len(concs) * len(systems) * *rounds
rounds:
	for round := 1; round <= *rounds; round++ {
		if !*skipMemory {
			for _, s := range systems {
				runNo++
				m, err := measureMemory(ctx, admin, cfg, s, round, fmt.Sprintf("m%d-", runNo))
				if ctx.Err() != nil {
					break rounds
				}
				if err != nil {
					fmt.Fprintf(stderr, "round %d  memory  %-12s error: %v\n", round, s, err)
				} else {
					fmt.Fprintf(stderr, "round %d  memory  %-12s %.0f bytes/job\n", round, s, m.BytesPerJob)
				}
				rep.Memory = append(rep.Memory, m)
			}
		}
		for _, w := range workloads {
			for _, c := range concs {
				for _, s := range systems {
					runNo++
					keep := *csvOut != "" && round == 1 && w.Kind == "spread"
					res, err := runOne(ctx, admin, cfg, s, w, c, round, fmt.Sprintf("r%d-", runNo), keep)
					if ctx.Err() != nil {
						break rounds
					}
					rep.Runs = append(rep.Runs, res)
					progress(len(rep.Runs), total, res, err)
				}
			}
		}
	}
	rep.FinishedAt = time.Now()
	code := 0
	if ctx.Err() != nil {
		rep.Interrupted = true
		fmt.Fprintln(stderr, "bench: interrupted; reporting the runs that finished")
		code = 130
	}
	rep.Summary = summarizeRuns(rep.Runs, systems, workloads, concs)
	rep.MemorySummary = summarizeMemory(rep.Memory)
	printTables(os.Stdout, rep, systems)

	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			code = 1
		}
	}
	if *tableOut != "" {
		var b strings.Builder
		writeMarkdownTable(&b, rep, systems, *tableSubject, os.Args[1:], rev, loadStart, loadAverage())
		if err := os.WriteFile(*tableOut, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			code = 1
		}
	}
	if *svgOut != "" {
		title := fmt.Sprintf("Spread workload: lateness distribution (%s, redis %s, %d CPUs)", rep.Host.GoVersion, rep.Host.RedisVersion, rep.Host.NumCPU)
		if err := writeLatenessSVG(*svgOut, spreadSeries(rep.Runs, systems, concs), *n, title); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			code = 1
		}
	}
	if *csvOut != "" {
		if err := writeLatenessCSV(*csvOut, rep.Runs); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			code = 1
		}
	}
	return code
}

func progress(i, total int, r RunResult, err error) {
	head := fmt.Sprintf("[%d/%d] round %d  %-16s c=%-4d %-12s", i, total, r.Round, r.Workload, r.Concurrency, r.System)
	if err != nil {
		fmt.Fprintf(stderr, "%s error: %v\n", head, err)
		return
	}
	f := r.Figures
	p99 := "n/a"
	if f.LatenessP99Ms != nil {
		p99 = fmtMs(*f.LatenessP99Ms)
	}
	fmt.Fprintf(stderr, "%s enq %.0f/s  drain %.0f/s  p99 %s ms  dup %d  lost %d  (%.1fs)\n",
		head, f.EnqueuePerSec, f.DrainPerSec, p99, f.Duplicates, f.Lost, r.WallSeconds)
	if f.Stray > 0 {
		fmt.Fprintf(stderr, "  warning: %d deliveries of ids not enqueued by this run\n", f.Stray)
	}
}

func summarizeRuns(runs []RunResult, systems []string, workloads []workloadSpec, concs []int) []SummaryRow {
	rows := []SummaryRow{}
	for _, w := range workloads {
		for _, c := range concs {
			for _, s := range systems {
				row := SummaryRow{System: s, Workload: w.Label(), Concurrency: c, Metrics: map[string]*Summary{}}
				var good []*Figures
				for i := range runs {
					r := &runs[i]
					if r.System != s || r.Workload != w.Label() || r.Concurrency != c {
						continue
					}
					if r.Error != "" {
						row.Errors = append(row.Errors, fmt.Sprintf("round %d: %s", r.Round, r.Error))
						continue
					}
					good = append(good, &r.Figures)
				}
				if len(good) == 0 && len(row.Errors) == 0 {
					continue // not run (interrupted)
				}
				row.Rounds = len(good)
				for _, m := range metrics {
					var xs []float64
					for _, f := range good {
						if v, ok := m.get(f); ok {
							xs = append(xs, v)
						}
					}
					if sm, ok := summarize(xs); ok {
						row.Metrics[m.key] = &sm
					} else {
						row.Metrics[m.key] = nil
					}
				}
				rows = append(rows, row)
			}
		}
	}
	return rows
}

func summarizeMemory(ms []MemoryResult) map[string]Summary {
	by := map[string][]float64{}
	for _, m := range ms {
		if m.Error == "" {
			by[m.System] = append(by[m.System], m.BytesPerJob)
		}
	}
	out := map[string]Summary{}
	for s, xs := range by {
		if sm, ok := summarize(xs); ok {
			out[s] = sm
		}
	}
	return out
}

func cell(s *Summary, format func(float64) string) string {
	if s == nil {
		return "n/a"
	}
	if s.N > 1 && s.Min != s.Max {
		return fmt.Sprintf("%s [%s–%s]", format(s.Median), format(s.Min), format(s.Max))
	}
	return format(s.Median)
}

func printTables(out io.Writer, rep *Report, systems []string) {
	rounds := rep.Config.Rounds
	fmt.Fprintf(out, "delayq bench: n=%d backlog=%d rounds=%d producers=%d batch=%d  (go %s, %d CPUs, redis %s)\n",
		rep.Config.N, rep.Config.Backlog, rounds, rep.Config.Producers, rep.Config.BatchSize,
		rep.Host.GoVersion, rep.Host.NumCPU, rep.Host.RedisVersion)
	if rounds > 1 {
		fmt.Fprintln(out, "cells: median [min–max] over rounds")
	}
	titles := map[int]string{
		1: "Throughput and cost",
		2: "Timing and correctness (lateness = handler start − max(ready, enqueue returned))",
		3: "Redis per job: requests (read events), script calls and commands (those run by scripts included), CPU; enq = burst enqueue, drain = drain window (spread: producers too)",
		4: "Client heap allocations per job, whole harness process (runtime.MemStats); enq = burst enqueue, drain = drain window (spread: producers too)",
	}
	for table := 1; table <= 4; table++ {
		fmt.Fprintf(out, "\n%s\n", titles[table])
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := []string{"system", "workload", "conc"}
		for _, m := range metrics {
			if m.table == table {
				hdr = append(hdr, m.header)
			}
		}
		fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
		for _, row := range rep.Summary {
			cols := []string{row.System, row.Workload, strconv.Itoa(row.Concurrency)}
			if row.Rounds == 0 {
				cols = append(cols, "error: "+row.Errors[0])
				fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
				continue
			}
			for _, m := range metrics {
				if m.table == table {
					cols = append(cols, cell(row.Metrics[m.key], m.format))
				}
			}
			fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
		}
		tw.Flush()
	}
	if len(rep.MemorySummary) > 0 {
		fmt.Fprintf(out, "\nRedis memory per scheduled job (used_memory delta / %d jobs scheduled 1 h ahead)\n", rep.Config.N)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "system\tbytes/job\t")
		for _, s := range systems {
			if sm, ok := rep.MemorySummary[s]; ok {
				fmt.Fprintf(tw, "%s\t%s\t\n", s, cell(&sm, fmtInt))
			}
		}
		tw.Flush()
	}
	for _, row := range rep.Summary {
		for _, e := range row.Errors {
			fmt.Fprintf(out, "error: %s %s c=%d %s\n", row.System, row.Workload, row.Concurrency, e)
		}
	}
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func writeLatenessCSV(path string, runs []RunResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"system", "concurrency", "job_id", "ready_ms", "enqueued_ms", "handled_ms", "lateness_ms"})
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	for _, r := range runs {
		for _, s := range r.samples {
			late := math.NaN()
			if !math.IsNaN(s.HandledMs) {
				late = s.HandledMs - math.Max(s.ReadyMs, s.EnqMs)
			}
			_ = w.Write([]string{r.System, strconv.Itoa(r.Concurrency), s.ID, num(s.ReadyMs), num(s.EnqMs), num(s.HandledMs), num(late)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
