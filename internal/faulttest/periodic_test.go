package faulttest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/internal/tickid"
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

// startSchedProc starts a faultscheduler called name, with env added to
// its environment (FAULTSCHED_QUEUE, FAULTSCHED_SCHEDULES, ...).
func startSchedProc(t *testing.T, bin, url, ns, name string, env ...string) *schedProc {
	t.Helper()
	outPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "FAULTSCHED_URL="+url, "FAULTSCHED_NS="+ns, "FAULTSCHED_NAME="+name)
	cmd.Env = append(cmd.Env, env...)
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
	stopWorker := runWorker(t, worker.Options{
		Broker: s.b, Registry: reg, Queues: []worker.Queue{{Name: queue}}, MaxIdle: 500 * time.Millisecond,
		Middleware: []job.Middleware{periodic.Outcomes(s.b)},
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
		if handled[tickid.ID("tick", at)] == 0 {
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
	s.finish(t, []string{queue}, pk.Schedules, pk.Last, pk.Outcomes, pk.Ticks, pk.Secret, testkit.Keys(t, s.b, queue).Unique)
}

// log returns what the process wrote.
func (p *schedProc) log(t *testing.T) string {
	t.Helper()
	out, err := os.ReadFile(p.out)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// tickCounter counts the handlings of tick jobs by id and queue, in a
// worker of the queues given.
type tickCounter struct {
	mu      sync.Mutex
	handled map[string]int            // job id -> handlings
	queues  map[string]map[string]int // job id -> queue -> handlings
}

func countTicks(t *testing.T, s *suite, queues ...string) (*tickCounter, func()) {
	t.Helper()
	c := &tickCounter{handled: map[string]int{}, queues: map[string]map[string]int{}}
	reg := job.NewRegistry()
	job.New[tickArgs]("fault.tick").Handle(reg, func(_ context.Context, j *job.Job[tickArgs]) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.handled[j.ID]++
		if c.queues[j.ID] == nil {
			c.queues[j.ID] = map[string]int{}
		}
		c.queues[j.ID][j.Queue]++
		return nil
	})
	var qs []worker.Queue
	for _, q := range queues {
		qs = append(qs, worker.Queue{Name: q})
	}
	stop := runWorker(t, worker.Options{
		Broker: s.b, Registry: reg, Queues: qs, MaxIdle: 500 * time.Millisecond,
		Middleware: []job.Middleware{periodic.Outcomes(s.b)},
	})
	return c, stop
}

// ticksOf returns the ticks of schedule name that were handled, sorted,
// and fails the test on an id that is not a tick's.
func (c *tickCounter) ticksOf(t *testing.T, name string) []time.Time {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for id := range c.handled {
		rest, ok := strings.CutPrefix(id, name+"@")
		if !ok {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05Z", rest)
		if err != nil {
			t.Fatalf("job %q is not a tick of %s", id, name)
		}
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// exactlyOnce checks that every tick of name from its first handled tick
// to its last was handled once, and returns how many ticks that span
// holds, how many of them were never handled and how many more than once.
func (c *tickCounter) exactlyOnce(t *testing.T, name string) (span, missing, twice int) {
	t.Helper()
	ticks := c.ticksOf(t, name)
	if len(ticks) == 0 {
		t.Errorf("no tick of %s handled", name)
		return 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for at := ticks[0]; !at.After(ticks[len(ticks)-1]); at = at.Add(time.Second) {
		span++
		switch n := c.handled[tickid.ID(name, at)]; {
		case n == 0:
			missing++
			t.Errorf("tick %s never handled", tickid.ID(name, at))
		case n > 1:
			twice++
			t.Errorf("tick %s handled %d times (queues %v)", tickid.ID(name, at), n, c.queues[tickid.ID(name, at)])
		}
	}
	return span, missing, twice
}

// TestPeriodicPoisonedSchedule runs two faultscheduler processes, each
// with three every-second schedules, one of whose jobs expire 3 s after
// the start (job.ExpireAt, which Add accepts then), for 14 seconds, one
// killed with SIGKILL half-way, while a worker drains. Every tick of the
// two healthy schedules from the first to the last is handled exactly
// once; no tick of the expiring schedule after its expiry is enqueued; its
// last outcome is "refused" with why, and the schedulers' logs name it
// and why.
func TestPeriodicPoisonedSchedule(t *testing.T) {
	skipSlow(t)
	bin := buildCommand(t, "faultscheduler")
	srv := startServer(t)
	const ns, queue = "poisoned", "ticks"
	s := newSuite(t, srv, ns, queue)
	url := "redis://" + srv.Addr() + "/0"
	c, stopWorker := countTicks(t, s, queue)

	start := time.Now()
	expireAt := start.Add(3 * time.Second)
	env := []string{"FAULTSCHED_SCHEDULES=healthy-a,expiring,healthy-b", "FAULTSCHED_EXPIRE=expiring=" + expireAt.UTC().Format(time.RFC3339Nano)}
	procs := []*schedProc{startSchedProc(t, bin, url, ns, "s1", env...), startSchedProc(t, bin, url, ns, "s2", env...)}
	const run = 14 * time.Second
	time.Sleep(time.Until(start.Add(run / 2)))
	_ = procs[1].cmd.Process.Kill() // SIGKILL
	<-procs[1].done
	time.Sleep(time.Until(start.Add(run)))
	stoppedAt := time.Now()
	procs[0].stop(t)
	s.waitDrained(t, queue, 30*time.Second)
	stopWorker()

	spanA, missingA, twiceA := c.exactlyOnce(t, "healthy-a")
	spanB, missingB, twiceB := c.exactlyOnce(t, "healthy-b")
	for name, ticks := range map[string][]time.Time{"healthy-a": c.ticksOf(t, "healthy-a"), "healthy-b": c.ticksOf(t, "healthy-b")} {
		if len(ticks) > 0 && (ticks[0].After(start.Add(3*time.Second)) || ticks[len(ticks)-1].Before(stoppedAt.Add(-3*time.Second))) {
			t.Errorf("%s: ticks from %s to %s; the schedulers ran from %s to %s", name, ticks[0], ticks[len(ticks)-1], start, stoppedAt)
		}
	}
	if spanA < 10 || spanB < 10 {
		t.Errorf("healthy ticks handled over %d and %d seconds, want at least 10", spanA, spanB)
	}
	expired := c.ticksOf(t, "expiring")
	for _, at := range expired {
		if at.After(expireAt) {
			t.Errorf("tick %s of the expiring schedule handled, after its expiry %s", at, expireAt)
		}
	}
	list, err := periodic.List(s.ctx, s.b, time.Time{})
	if err != nil || len(list) != 3 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	var refused *periodic.LastOutcome
	for _, st := range list {
		if st.Name == "expiring" {
			refused = st.Outcome
		}
	}
	if refused == nil || refused.Result != periodic.ResultRefused || !strings.Contains(refused.Error, "is not after the ready time") ||
		!refused.Tick.After(expireAt) {
		t.Errorf("the expiring schedule's last outcome: %+v; want refused, saying why", refused)
	}
	// The dashboard's Periodic page shows the refusal, with why.
	d, err := dashboard.New(s.b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	defer web.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := client.Get(web.URL + "/periodic")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /periodic: %d, %v", resp.StatusCode, err)
	}
	for _, want := range []string{"<bdi>expiring</bdi>", `<span class="outcome o-refused">refused</span>`, "is not after the ready time"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the dashboard's Periodic page lacks %q", want)
		}
	}
	logged := 0
	for _, p := range procs {
		for _, line := range strings.Split(p.log(t), "\n") {
			if strings.Contains(line, `"schedule":"expiring"`) && strings.Contains(line, "is not after the ready time") {
				logged++
			}
		}
	}
	if logged == 0 {
		t.Errorf("no scheduler logged the refused ticks with the schedule's name and why:\n%s", procs[0].log(t))
	}
	summary(t, "healthy ticks", spanA+spanB, "missing", missingA+missingB, "handled twice", twiceA+twiceB,
		"expiring ticks handled (all before the expiry)", len(expired), "refusals logged", logged,
		"expiring last outcome", refused.Result, "schedulers", 2, "kills", 1)
	pk := keyspace.Periodic(ns)
	s.finish(t, []string{queue}, pk.Schedules, pk.Last, pk.Outcomes, pk.Ticks, pk.Secret, testkit.Keys(t, s.b, queue).Unique)
}

// TestPeriodicQueueMove is a rolling deploy that moves an every-second
// schedule from queue qa to qb: a faultscheduler declaring it on qa runs
// alone for 4 s, one declaring it on qb starts, both run for 15 s, the old
// one stops, the new one runs 4 s more, while a worker drains both
// queues. Every tick from the first to the last is handled exactly once,
// in one of the queues; the overlap is logged.
func TestPeriodicQueueMove(t *testing.T) {
	skipSlow(t)
	bin := buildCommand(t, "faultscheduler")
	srv := startServer(t)
	const ns = "move"
	s := newSuite(t, srv, ns, "qa", "qb")
	url := "redis://" + srv.Addr() + "/0"
	c, stopWorker := countTicks(t, s, "qa", "qb")

	start := time.Now()
	old := startSchedProc(t, bin, url, ns, "old", "FAULTSCHED_QUEUE=qa", "FAULTSCHED_SCHEDULES=mv")
	time.Sleep(time.Until(start.Add(4 * time.Second)))
	cur := startSchedProc(t, bin, url, ns, "new", "FAULTSCHED_QUEUE=qb", "FAULTSCHED_SCHEDULES=mv")
	overlapFrom := time.Now()
	time.Sleep(15 * time.Second)
	old.stop(t)
	overlapTo := time.Now()
	time.Sleep(4 * time.Second)
	cur.stop(t)
	s.waitDrained(t, "qa", 30*time.Second)
	s.waitDrained(t, "qb", 30*time.Second)
	stopWorker()

	span, missing, twice := c.exactlyOnce(t, "mv")
	if span < 20 {
		t.Errorf("ticks handled over %d seconds, want at least 20", span)
	}
	inOverlap := map[string]int{}
	c.mu.Lock()
	for id, qs := range c.queues {
		at, _ := time.Parse("2006-01-02T15:04:05Z", strings.TrimPrefix(id, "mv@"))
		if !at.Before(overlapFrom.Truncate(time.Second).Add(time.Second)) && at.Before(overlapTo.Truncate(time.Second)) {
			for q := range qs {
				inOverlap[q]++
			}
		}
	}
	c.mu.Unlock()
	if inOverlap["qa"]+inOverlap["qb"] < 12 {
		t.Errorf("ticks handled during the overlap: %v, want at least 12", inOverlap)
	}
	moved := strings.Count(old.log(t)+cur.log(t), "another scheduler declares this schedule on another queue")
	summary(t, "ticks", span, "missing", missing, "handled twice", twice, "overlap", overlapTo.Sub(overlapFrom).Round(time.Second),
		"overlap ticks in qa", inOverlap["qa"], "in qb", inOverlap["qb"], "overlap warnings logged", moved)
	pk := keyspace.Periodic(ns)
	s.finish(t, []string{"qa", "qb"}, pk.Schedules, pk.Last, pk.Outcomes, pk.Ticks, pk.Secret,
		testkit.Keys(t, s.b, "qa").Unique, testkit.Keys(t, s.b, "qb").Unique)
}
