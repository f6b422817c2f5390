package faulttest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
	"github.com/delayq/delayq/worker"
)

// tickArgs are the arguments of the periodic suite's jobs (those of
// cmd/faultscheduler).
type tickArgs struct {
	Schedule string `json:"schedule"`
}

// schedProc is one faultscheduler process.
type schedProc struct {
	cmd  *exec.Cmd
	out  string
	done chan struct{}
}

func startSchedProc(t *testing.T, bin, url, ns, name string) *schedProc {
	t.Helper()
	outPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "FAULTSCHED_URL="+url, "FAULTSCHED_NS="+ns, "FAULTSCHED_NAME="+name)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &schedProc{cmd: cmd, out: outPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	// Signals are meant for a process that handles them: wait for its line.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, _ := os.ReadFile(outPath); strings.Contains(string(out), "faultscheduler started") {
			return p
		}
		select {
		case <-p.done:
			out, _ := os.ReadFile(outPath)
			t.Fatalf("faultscheduler %s exited at start:\n%s", name, out)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("faultscheduler %s did not start within 30s", name)
		}
	}
}

// stop sends SIGTERM and waits for the exit; it fails the test if the
// process did not exit cleanly or wrote errors.
func (p *schedProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("faultscheduler did not stop within 30s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		out, _ := os.ReadFile(p.out)
		t.Errorf("faultscheduler exited with %d:\n%s", code, out)
	}
}

// TestPeriodicSchedulers runs three faultscheduler processes with the same
// every-second schedule for 66 seconds, kills one with SIGKILL half-way and
// starts it again 2 s later, while an in-process worker drains the queue.
// Every tick from the first to the last is handled exactly once: none
// missing (the others cover the killed one), none twice (the tick's id).
func TestPeriodicSchedulers(t *testing.T) {
	skipSlow(t)
	bin := buildCommand(t, "faultscheduler")
	srv := startServer(t)
	const ns, queue = "periodic", "ticks"
	s := newSuite(t, srv, ns, queue)
	url := "redis://" + srv.Addr() + "/0"

	var mu sync.Mutex
	handled := map[string]int{}
	reg := job.NewRegistry()
	tickType := job.New[tickArgs]("fault.tick", job.Queue(queue))
	tickType.Handle(reg, func(_ context.Context, j *job.Job[tickArgs]) error {
		mu.Lock()
		handled[j.ID]++
		mu.Unlock()
		return nil
	})
	stopWorker := runWorker(t, worker.Config{
		Broker: s.b, Registry: reg, Queues: []worker.Queue{{Name: queue}}, MaxIdle: 500 * time.Millisecond,
		Middleware: append(worker.DefaultMiddleware(), periodic.Outcomes(s.b)),
	})

	start := time.Now()
	procs := []*schedProc{
		startSchedProc(t, bin, url, ns, "s1"),
		startSchedProc(t, bin, url, ns, "s2"),
		startSchedProc(t, bin, url, ns, "s3"),
	}
	const run = 66 * time.Second
	time.Sleep(time.Until(start.Add(run / 2)))
	_ = procs[1].cmd.Process.Kill() // SIGKILL
	<-procs[1].done
	killedAt := time.Now()
	time.Sleep(2 * time.Second)
	procs[1] = startSchedProc(t, bin, url, ns, "s2-restarted")
	time.Sleep(time.Until(start.Add(run)))
	stoppedAt := time.Now()
	for _, p := range procs {
		p.stop(t)
	}
	s.waitDrained(t, queue, 30*time.Second)
	// The worker's outcomes are written after its acks: give them a moment.
	var st periodic.Status
	redistest.WaitFor(t, 10*time.Second, "the last outcome recorded", func() bool {
		list, err := periodic.List(s.ctx, s.b, time.Time{})
		if err != nil || len(list) != 1 {
			return false
		}
		st = list[0]
		return st.Outcome != nil && st.Outcome.Tick.Equal(st.Last)
	})
	stopWorker()

	mu.Lock()
	defer mu.Unlock()
	var ticks []time.Time
	duplicates := 0
	for id, n := range handled {
		at, err := time.Parse("2006-01-02T15:04:05Z", strings.TrimPrefix(id, "tick@"))
		if err != nil || !strings.HasPrefix(id, "tick@") {
			t.Fatalf("job %q is not a tick of the schedule", id)
		}
		ticks = append(ticks, at)
		if n != 1 {
			duplicates++
			t.Errorf("tick %s handled %d times", id, n)
		}
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	if len(ticks) == 0 {
		t.Fatal("no tick handled")
	}
	first, last := ticks[0], ticks[len(ticks)-1]
	missing := 0
	for at := first; !at.After(last); at = at.Add(time.Second) {
		if handled[periodic.TickID("tick", at)] == 0 {
			missing++
			t.Errorf("tick %s never handled", at.Format(time.RFC3339))
		}
	}
	span := int(last.Sub(first)/time.Second) + 1
	if span < 60 {
		t.Errorf("ticks from %s to %s: %d, want at least 60", first.Format(time.RFC3339), last.Format(time.RFC3339), span)
	}
	if first.After(start.Add(5*time.Second)) || last.Before(stoppedAt.Add(-5*time.Second)) {
		t.Errorf("ticks from %s to %s; the schedulers ran from %s to %s", first, last, start, stoppedAt)
	}
	if st.Stale || !st.Last.Equal(last) || st.Outcome == nil || st.Outcome.Result != "success" {
		t.Errorf("stored schedule: %+v, outcome %+v; want live, last %s, success", st, st.Outcome, last)
	}
	summary(t, "ticks", span, "handled", len(ticks), "missing", missing, "duplicates", duplicates,
		"schedulers", 3, "kills", 1, "killed at", killedAt.Sub(start).Round(time.Second), "restarts", 1)
	pk := keyspace.Periodic(ns)
	s.finish(t, []string{queue}, pk.Schedules, pk.Last, pk.Outcomes, pk.Ticks, testkit.Keys(t, s.b, queue).Unique)
}
