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
}

// rlCompletion is one handled job, as a worker process reported it.
type rlCompletion struct {
	at      time.Time
	attempt int
	id      string
	proc    int
}

// runRateLimit does the rate-limit run against url and prints its figures.
func runRateLimit(ctx context.Context, url string, c rateLimitConfig, out io.Writer) error {
	rdb, err := newRedisClient(url, 8)
	if err != nil {
		return err
	}
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Namespace: rlNamespace})
	if err != nil {
		return err
	}
	limit := broker.RateLimit{Count: c.Rate, Per: time.Second, Burst: c.Burst}
	if err := b.SetRateLimit(ctx, rlJob.Queue(), rlJob.Name(), limit); err != nil {
		return err
	}
	now := time.Now()
	for i := 0; i < c.N; i += 1000 {
		var envs []*job.Envelope
		for k := i; k < min(i+1000, c.N); k++ {
			env, err := rlJob.Envelope(json.RawMessage(`{}`), job.ID(fmt.Sprintf("j%06d", k)), job.At(now))
			if err != nil {
				return err
			}
			envs = append(envs, env)
		}
		if err := b.Enqueue(ctx, envs...); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	done := make(chan rlCompletion, c.N)
	var cmds []*exec.Cmd
	var readers sync.WaitGroup
	stopAll := func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		readers.Wait()
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
	}
	start := time.Now()
	for p := range c.Procs {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), rlWorkerEnv+"="+url, "DELAYQ_BENCH_RL_CONCURRENCY="+strconv.Itoa(c.Concurrency))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			stopAll()
			return err
		}
		if err := cmd.Start(); err != nil {
			stopAll()
			return err
		}
		cmds = append(cmds, cmd)
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 3 {
					continue
				}
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				attempt, _ := strconv.Atoi(f[1])
				select {
				case done <- rlCompletion{at: time.Unix(0, ns), attempt: attempt, id: f[2], proc: p}:
				default: // more than N: a duplicate, counted from the ids below
				}
			}
		}()
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
	st, err := b.Stats(context.Background(), rlJob.Queue())
	if err != nil {
		return err
	}
	if len(got) < c.N {
		return fmt.Errorf("rate-limit run: %d of %d jobs handled within %v", len(got), c.N, c.Timeout)
	}
	printRateLimit(out, c, start, got, st.Dead)
	return nil
}

// printRateLimit prints the figures of a rate-limit run.
func printRateLimit(out io.Writer, c rateLimitConfig, start time.Time, got []rlCompletion, dead int64) {
	slices.SortFunc(got, func(a, b rlCompletion) int { return a.at.Compare(b.at) })
	first, last := got[0].at, got[len(got)-1].at
	ids := map[string]int{}
	perProc := make([]int, c.Procs)
	later := 0
	for _, x := range got {
		ids[x.id]++
		perProc[x.proc]++
		if x.attempt > 1 {
			later++
		}
	}
	// Completions in each whole second after the first completion.
	var perSec []int
	for _, x := range got {
		s := int(x.at.Sub(first) / time.Second)
		for len(perSec) <= s {
			perSec = append(perSec, 0)
		}
		perSec[s]++
	}
	whole := perSec[:len(perSec)-1] // the last second is partial
	sorted := slices.Clone(whole)
	slices.Sort(sorted)
	span := last.Sub(first).Seconds()
	steady := float64(len(got)-c.Burst) / span // the first Burst start at once
	fmt.Fprintf(out, "rate-limit run: %d jobs due at once, limit %d/s burst %d on type %s, %d worker processes × concurrency %d, each with its own client\n",
		c.N, c.Rate, c.Burst, rlJob.Name(), c.Procs, c.Concurrency)
	fmt.Fprintf(out, "  first completion %.3fs after the workers started, last %.3fs\n", first.Sub(start).Seconds(), last.Sub(start).Seconds())
	fmt.Fprintf(out, "  completions/s over the run: %.1f ((N − burst) / (last − first)), %+.2f %% vs the limit\n", steady, (steady/float64(c.Rate)-1)*100)
	if len(sorted) > 0 {
		fmt.Fprintf(out, "  completions per whole second (%d seconds): min %d, median %d, max %d\n", len(sorted), sorted[0], sorted[len(sorted)/2], sorted[len(sorted)-1])
	}
	fmt.Fprintf(out, "  per process: %v\n", perProc)
	fmt.Fprintf(out, "  attempts after the first (spent on limiting): %d; distinct ids %d of %d; dead %d\n", later, len(ids), c.N, dead)
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
		fmt.Fprintf(w, "%d %d %s\n", time.Now().UnixNano(), j.Attempt, j.ID)
		return w.Flush()
	})
	wk, err := worker.New(worker.Config{Broker: b, Registry: reg, Concurrency: max(conc, 1)})
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
