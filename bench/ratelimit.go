package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// The rate-limit run: N jobs due at once under a fleet-wide limit, drained
// by worker processes of this binary (started with rlWorkerEnv set), each
// with its own Redis client. A worker prints one line per handled job:
// "<unix ns> <attempt> <id>".
const rlWorkerEnv, rlNamespace = "DELAYQ_BENCH_RL_WORKER", "rl"

// rlJob is the limited job type; the limit is on the type.
var rlJob = job.New[json.RawMessage]("bench.limited")

type rateLimitConfig struct {
	N, Rate, Burst, Procs, Concurrency int
	Timeout                            time.Duration
	// On is "type" (the limit is on the jobs' type) or "queue" (on their
	// queue).
	On string
	// Strict: a strict window of Rate in any second, widened by Slack.
	Strict bool
	Slack  time.Duration
}

func (c rateLimitConfig) limit() job.RateLimit {
	if c.Strict {
		return job.RateLimit{Count: c.Rate, Per: time.Second, Strict: true, Slack: c.Slack}
	}
	return job.RateLimit{Count: c.Rate, Per: time.Second, Burst: c.Burst}
}

// rlCompletion is one handled job, as a worker process reported it.
type rlCompletion struct {
	at      time.Time // the handler's start
	claimed time.Time // the claim, on the server's clock (job.Message.ClaimedAt)
	attempt int
	id      string
	proc    int
}

// rlResult is the figures of one rate-limit run.
type rlResult struct {
	Rate           float64 // starts/s over the run: (N − the first burst) / (last − first start)
	Busiest        int     // the most handler starts in any 1 s window [t, t+1s)
	Later          int     // attempts after the first (spent on limiting)
	OutOfOrder     int     // jobs that started ≥ 100 ms before a job ready earlier
	DriftMax       time.Duration
	DriftP99       time.Duration
	ScriptsPerJob  float64
	CommandsPerJob float64
	CPUPerJob      time.Duration // Redis used_cpu_user + used_cpu_sys
	Last           time.Duration // from the workers' start to the last start
	Dead           int64
	Distinct       int
}

// runRateLimit does one rate-limit run against url (FLUSHALLed first
// through admin) and prints its figures.
func runRateLimit(ctx context.Context, url string, admin *redisAdmin, c rateLimitConfig, out io.Writer) (rlResult, error) {
	if err := admin.FlushAll(ctx); err != nil {
		return rlResult{}, err
	}
	rdb, err := newRedisClient(url, 8)
	if err != nil {
		return rlResult{}, err
	}
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Namespace: rlNamespace})
	if err != nil {
		return rlResult{}, err
	}
	typ := rlJob.Name()
	if c.On == "queue" {
		typ = ""
	}
	if err := b.SetRateLimit(ctx, rlJob.Queue(), typ, c.limit()); err != nil {
		return rlResult{}, err
	}
	// Ready times 1 ms apart, all in the past: the order to keep.
	now := time.Now().Add(-time.Duration(c.N) * time.Millisecond)
	for i := 0; i < c.N; i += 1000 {
		var envs []*job.Envelope
		for k := i; k < min(i+1000, c.N); k++ {
			env, err := rlJob.Envelope(json.RawMessage(`{}`), job.ID(fmt.Sprintf("j%06d", k)), job.At(now.Add(time.Duration(k)*time.Millisecond)))
			if err != nil {
				return rlResult{}, err
			}
			envs = append(envs, env)
		}
		if err := b.Enqueue(ctx, envs...); err != nil {
			return rlResult{}, err
		}
	}
	before, err := admin.Counters(ctx)
	if err != nil {
		return rlResult{}, err
	}
	cpuBefore, err := admin.CPU(ctx)
	if err != nil {
		return rlResult{}, err
	}
	done := make(chan rlCompletion, c.N)
	start := time.Now()
	stopAll, err := startWorkerProcs(url, c.Procs, c.Concurrency, done)
	if err != nil {
		return rlResult{}, err
	}
	var got []rlCompletion
	deadline := time.After(c.Timeout)
wait:
	for len(got) < c.N {
		select {
		case x := <-done:
			got = append(got, x)
		case <-deadline:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	stopAll()
	after, err := admin.Counters(context.Background())
	if err != nil {
		return rlResult{}, err
	}
	cpuAfter, err := admin.CPU(context.Background())
	if err != nil {
		return rlResult{}, err
	}
	sts, err := b.Stats(context.Background(), rlJob.Queue())
	if err != nil {
		return rlResult{}, err
	}
	st := sts[0]
	if len(got) < c.N {
		return rlResult{}, fmt.Errorf("rate-limit run: %d of %d jobs handled within %v", len(got), c.N, c.Timeout)
	}
	r := rateLimitFigures(c, start, got, st.Dead)
	d := deltaPerJob(before, after, c.N)
	r.ScriptsPerJob, r.CommandsPerJob = d.ScriptsPerJob, d.CommandsPerJob
	r.CPUPerJob = time.Duration((cpuAfter - cpuBefore) / float64(c.N) * float64(time.Second))
	printRateLimit(out, c, r, got)
	return r, nil
}

// startWorkerProcs starts procs worker processes of this binary
// (rateLimitWorker) of concurrency conc on the Redis at url, and sends
// each job they report handled to done (dropping what done has no room
// for: more than it was sized for are duplicates, counted from the ids).
// stop ends them with SIGTERM and waits for them.
func startWorkerProcs(url string, procs, conc int, done chan<- rlCompletion) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	var readers sync.WaitGroup
	stop = func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		readers.Wait()
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
	}
	for p := range procs {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), rlWorkerEnv+"="+url, "DELAYQ_BENCH_RL_CONCURRENCY="+strconv.Itoa(conc))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, cmd)
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 4 {
					continue
				}
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				attempt, _ := strconv.Atoi(f[1])
				claimed, _ := strconv.ParseInt(f[3], 10, 64)
				select {
				case done <- rlCompletion{at: time.Unix(0, ns), claimed: time.Unix(0, claimed), attempt: attempt, id: f[2], proc: p}:
				default:
				}
			}
		}()
	}
	return stop, nil
}

// rateLimitFigures computes the figures of a run from its starts.
func rateLimitFigures(c rateLimitConfig, start time.Time, got []rlCompletion, dead int64) rlResult {
	var r rlResult
	r.Dead = dead
	slices.SortFunc(got, func(a, b rlCompletion) int { return a.at.Compare(b.at) })
	first, last := got[0].at, got[len(got)-1].at
	r.Last = last.Sub(start)
	ids := map[string]int{}
	var drifts []time.Duration
	for _, x := range got {
		ids[x.id]++
		if x.attempt > 1 {
			r.Later++
		}
		drifts = append(drifts, x.at.Sub(x.claimed))
	}
	r.Distinct = len(ids)
	slices.Sort(drifts)
	r.DriftMax, r.DriftP99 = drifts[len(drifts)-1], drifts[len(drifts)*99/100]
	// The busiest window [t, t+1s) of starts.
	for i, j := 0, 0; j < len(got); j++ {
		for got[j].at.Sub(got[i].at) >= time.Second {
			i++
		}
		r.Busiest = max(r.Busiest, j-i+1)
	}
	// Out of order: in ready order (the ids), a job that started at least
	// 100 ms before the latest start of the jobs ready before it.
	byID := slices.Clone(got)
	slices.SortFunc(byID, func(a, b rlCompletion) int { return strings.Compare(a.id, b.id) })
	var latest time.Time
	for _, x := range byID {
		if latest.Sub(x.at) >= 100*time.Millisecond {
			r.OutOfOrder++
		}
		if x.at.After(latest) {
			latest = x.at
		}
	}
	head := max(c.Burst, 1) // the first burst starts at once
	if c.Strict {
		head = c.Rate
	}
	r.Rate = float64(len(got)-head) / last.Sub(first).Seconds()
	return r
}

// printRateLimit prints the figures of a rate-limit run.
func printRateLimit(out io.Writer, c rateLimitConfig, r rlResult, got []rlCompletion) {
	perProc := make([]int, c.Procs)
	for _, x := range got {
		perProc[x.proc]++
	}
	fmt.Fprintf(out, "rate-limit run: %d jobs due at once (ready 1 ms apart), limit %v on the %s, %d worker processes × concurrency %d, each with its own client\n",
		c.N, c.limit(), c.On, c.Procs, c.Concurrency)
	fmt.Fprintf(out, "  starts/s over the run: %.1f, %+.2f %% vs the limit; busiest 1 s window of handler starts: %d; last start %.2fs after the workers started\n",
		r.Rate, (r.Rate/float64(c.Rate)-1)*100, r.Busiest, r.Last.Seconds())
	fmt.Fprintf(out, "  claim → handler start: p99 %v, max %v; jobs started ≥ 100 ms before one ready earlier: %d\n",
		r.DriftP99.Round(10*time.Microsecond), r.DriftMax.Round(10*time.Microsecond), r.OutOfOrder)
	fmt.Fprintf(out, "  Redis per job: %.2f script calls, %.1f commands, %.1f µs CPU\n", r.ScriptsPerJob, r.CommandsPerJob, float64(r.CPUPerJob)/float64(time.Microsecond))
	fmt.Fprintf(out, "  per process: %v; attempts after the first (spent on limiting): %d; distinct ids %d of %d; dead %d\n",
		perProc, r.Later, r.Distinct, c.N, r.Dead)
}

// printRateLimitMedians prints, per limit placement, the median [min–max]
// of the figures over the rounds.
func printRateLimitMedians(out io.Writer, on []string, res map[string][]rlResult) {
	med := func(v []float64) string {
		slices.Sort(v)
		return fmt.Sprintf("%.2f [%.2f–%.2f]", v[len(v)/2], v[0], v[len(v)-1])
	}
	fmt.Fprintf(out, "medians over %d rounds, interleaved:\n", len(res[on[0]]))
	for _, o := range on {
		var rate, busiest, scripts, cmds, cpu, ooo, later []float64
		for _, r := range res[o] {
			rate = append(rate, r.Rate)
			busiest = append(busiest, float64(r.Busiest))
			scripts = append(scripts, r.ScriptsPerJob)
			cmds = append(cmds, r.CommandsPerJob)
			cpu = append(cpu, float64(r.CPUPerJob)/float64(time.Microsecond))
			ooo = append(ooo, float64(r.OutOfOrder))
			later = append(later, float64(r.Later))
		}
		fmt.Fprintf(out, "  %-5s starts/s %s; busiest 1 s %s; script calls/job %s; commands/job %s; Redis CPU µs/job %s; out of order %s; later attempts %s\n",
			o, med(rate), med(busiest), med(scripts), med(cmds), med(cpu), med(ooo), med(later))
	}
}

// rateLimitWorker is a worker process of the rate-limit run: it serves
// rlJob from the Redis at $DELAYQ_BENCH_RL_WORKER until SIGTERM.
func rateLimitWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conc, _ := strconv.Atoi(os.Getenv("DELAYQ_BENCH_RL_CONCURRENCY"))
	rdb, err := newRedisClient(os.Getenv(rlWorkerEnv), 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Namespace: rlNamespace})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	reg := job.NewRegistry()
	rlJob.Handle(reg, func(_ context.Context, j *job.Job[json.RawMessage]) error {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%d %d %s %d\n", time.Now().UnixNano(), j.Attempt, j.ID, j.ClaimedAt.UnixNano())
		return w.Flush()
	})
	wk, err := worker.New(worker.Options{Broker: b, Registry: reg, Concurrency: max(conc, 1)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	if err := wk.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	return 0
}
