//go:build linux

package faulttest_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// crashArgs mirror the faultworker's job arguments.
type crashArgs struct {
	N      int  `json:"n"`
	Poison bool `json:"poison,omitempty"`
}

// buildFaultWorker builds cmd/faultworker into the test's directory.
func buildFaultWorker(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "faultworker")
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/delayq/delayq/internal/faulttest/cmd/faultworker")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build faultworker: %v\n%s", err, b)
	}
	return out
}

// workerProc is one faultworker process.
type workerProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startWorkerProc starts a faultworker; extra environment entries
// (KEY=value) override the defaults.
func startWorkerProc(t *testing.T, bin, url, ns, name string, extra ...string) *workerProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "FAULTWORKER_URL="+url, "FAULTWORKER_NS="+ns, "FAULTWORKER_NAME="+name,
		"FAULTWORKER_FAIL=0.1", "FAULTWORKER_DELAY=5ms", "FAULTWORKER_LEASE=2s")
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The kernel kills the worker if the test binary dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &workerProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL, 0) })
	return p
}

// crashLoop runs four worker processes made by start (with a name each)
// and, every 2 s until done reports true or 120 s have passed, SIGKILLs one
// at random and starts another in its place. It returns the processes left
// running, the number killed and the loop's deadline.
func crashLoop(rng *rand.Rand, start func(name string) *workerProc, done func() bool) (procs []*workerProc, kills int, deadline time.Time) {
	started := 0
	spawn := func() {
		started++
		procs = append(procs, start("w"+strconv.Itoa(started)))
	}
	for range 4 {
		spawn()
	}
	deadline = time.Now().Add(120 * time.Second)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		i := rng.IntN(len(procs))
		procs[i].signal(syscall.SIGKILL, 0)
		kills++
		procs = slices.Delete(procs, i, i+1)
		spawn()
	}
	return procs, kills, deadline
}

// signal sends sig and waits up to timeout (forever if 0) for the exit,
// sending SIGKILL after it.
func (p *workerProc) signal(sig syscall.Signal, timeout time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	if timeout == 0 {
		<-p.done
		return
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// handling is one record a faultworker wrote: job id, worker, attempt and
// outcome (ok, fail, poison).
type handling struct {
	id, worker, outcome string
	attempt             int
}

// TestWorkerCrashes runs 20,000 jobs through faultworker processes whose
// handlers fail (10 %) and sleep at random, 1 % of the jobs failing
// permanently, while a random worker is killed with SIGKILL every 1 to 2.5
// seconds and replaced. Afterwards every job has succeeded at least once or
// is dead-lettered with its error; none is missing; no two handlings of a job
// share an attempt number (no double delivery under one lease); and every
// success beyond a job's first comes from a worker that was killed before it
// could ack.
func TestWorkerCrashes(t *testing.T) {
	skipSlow(t)
	bin := buildFaultWorker(t)
	srv := startServer(t)
	const ns, queue, total = "fault", naming.DefaultQueue, 20_000
	s := newSuite(t, srv, ns, queue)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)

	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	poison := map[string]bool{}
	envs := make([]*job.Envelope, total)
	for i := range envs {
		a := crashArgs{N: i, Poison: rng.IntN(100) == 0}
		id := fmt.Sprintf("j%05d", i)
		e, err := typ.Envelope(a, job.ID(id), job.In(time.Duration(rng.IntN(8000))*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		envs[i], poison[id] = e, a.Poison
	}
	for i := 0; i < total; i += 1000 {
		if err := s.b.Enqueue(s.ctx, envs[i:i+1000]...); err != nil {
			t.Fatal(err)
		}
	}

	url := "redis://" + srv.Addr() + "/0"
	started := 0
	var procs []*workerProc
	spawn := func() {
		started++
		procs = append(procs, startWorkerProc(t, bin, url, ns, "w"+strconv.Itoa(started)))
	}
	for range 4 {
		spawn()
	}
	killed := map[string]bool{}
	drained := func() bool {
		st, err := testkit.OneStats(s.b.Stats(s.ctx, queue))
		return err == nil && st.Scheduled == 0 && st.Processing == 0
	}
	deadline := time.Now().Add(90 * time.Second)
	for len(killed) < 12 && !drained() && time.Now().Before(deadline) {
		time.Sleep(time.Second + time.Duration(rng.IntN(1500))*time.Millisecond)
		i := rng.IntN(len(procs))
		victim := procs[i]
		victim.signal(syscall.SIGKILL, 0)
		killed[victim.name] = true
		procs = slices.Delete(procs, i, i+1)
		spawn()
	}
	s.waitDrained(t, queue, time.Until(deadline)+30*time.Second)
	for _, p := range procs {
		p.signal(syscall.SIGTERM, 10*time.Second)
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			b, _ := os.ReadFile(p.log)
			if len(b) == 0 && !p.cmd.ProcessState.Exited() {
				continue // signalled before its runtime was up: it never ran
			}
			t.Errorf("worker %s exited with %d:\n%s", p.name, code, b)
		}
	}

	// What ran where.
	lines, err := s.rdb.LRange(s.ctx, ns+":log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	byJob := map[string][]handling{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("bad record %q", l)
		}
		att, _ := strconv.Atoi(f[2])
		byJob[f[0]] = append(byJob[f[0]], handling{id: f[0], worker: f[1], attempt: att, outcome: f[3]})
	}
	dead := map[string]*job.DeadRecord{}
	for cur := (protocol.DeadCursor{}); ; {
		recs, next, err := protocol.Dead(s.b).Page(s.ctx, queue, cur, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			dead[r.ID] = r
		}
		if next.IsZero() {
			break
		}
		cur = next
	}

	var lost, dups, dupJobs, okThenDead, poisonDead, exhausted, leaseDead []string
	for _, e := range envs {
		hs := byJob[e.ID]
		var oks, okByLive int
		seen := map[int]bool{}
		for _, h := range hs {
			if seen[h.attempt] {
				t.Errorf("job %s handled twice on attempt %d: %v", e.ID, h.attempt, hs)
			}
			seen[h.attempt] = true
			if h.outcome == "ok" {
				oks++
				if !killed[h.worker] {
					okByLive++
				}
			}
		}
		r := dead[e.ID]
		switch {
		case oks == 0 && r == nil:
			lost = append(lost, e.ID)
		case poison[e.ID] && (r == nil || !strings.Contains(r.Error, "poison job")):
			t.Errorf("poison job %s: dead record %+v, handlings %v", e.ID, r, hs)
		case r != nil && oks > 0:
			okThenDead = append(okThenDead, e.ID)
		}
		if r != nil {
			switch {
			case strings.Contains(r.Error, "poison job"):
				poisonDead = append(poisonDead, e.ID)
			case strings.Contains(r.Error, "transient failure"):
				exhausted = append(exhausted, e.ID)
			case strings.Contains(r.Error, "lease expired"):
				leaseDead = append(leaseDead, e.ID)
			default:
				t.Errorf("job %s dead-lettered with an unexpected error %q", e.ID, r.Error)
			}
		}
		if oks > 1 || oks == 1 && r != nil {
			dupJobs = append(dupJobs, e.ID)
			for range oks - 1 {
				dups = append(dups, e.ID)
			}
			// Every success but the last came from a worker killed before
			// its ack landed; a live worker's ack is never lost.
			if okByLive > 1 || r != nil && okByLive > 0 {
				t.Errorf("job %s succeeded more than once in workers that were not killed: %v", e.ID, hs)
			}
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d jobs lost (neither handled nor dead), e.g. %v", len(lost), lost[:min(10, len(lost))])
	}
	if len(killed) == 0 {
		t.Error("no worker was killed: the queue drained before the first kill")
	}
	deadLeft := s.finish(t, []string{queue}, ns+":log")
	summary(t, "jobs", total, "workers started", started, "SIGKILLs", len(killed), "handlings", len(lines),
		"lost", len(lost), "duplicate successes", fmt.Sprintf("%d (of %d jobs, all in killed workers before their ack)", len(dups), len(dupJobs)),
		"succeeded then dead", len(okThenDead), "dead", fmt.Sprintf("%d (poison %d, retries spent %d, lease expired %d)", deadLeft, len(poisonDead), len(exhausted), len(leaseDead)))
}
