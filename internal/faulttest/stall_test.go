//go:build linux

package faulttest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/faultproxy"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// stallArgs mirror the stallworker's job arguments.
type stallArgs struct {
	N      int  `json:"n"`
	HoldMS int  `json:"hold_ms,omitempty"`
	First  bool `json:"first,omitempty"`
}

var stallType = job.New[stallArgs]("stall.job", job.MaxRetries(20))

// startStallWorker starts a stallworker; extra environment entries
// (KEY=value) configure it.
func startStallWorker(t *testing.T, bin, url, ns, name string, extra ...string) *workerProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "STALLWORKER_URL="+url, "STALLWORKER_NS="+ns, "STALLWORKER_NAME="+name)
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &workerProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process takes no SIGKILL until it runs
		p.signal(syscall.SIGKILL, 0)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("the end of %s's log:\n%s", name, b)
		}
	})
	return p
}

// stop stops the worker with SIGSTOP and returns once the kernel shows it
// stopped, and when.
func (p *workerProc) stop(t *testing.T) time.Time {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	redistest.WaitFor(t, 5*time.Second, p.name+" stopped", func() bool {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...: the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
	})
	return time.Now()
}

// resume resumes the worker with SIGCONT and returns the time just before.
func (p *workerProc) resume(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return at
}

// logged returns how many lines of the worker's log hold every one of
// texts.
func (p *workerProc) logged(t *testing.T, texts ...string) int {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !slices.ContainsFunc(texts, func(text string) bool { return !strings.Contains(line, text) }) {
			n++
		}
	}
	return n
}

// stallSpan is one handling recorded by a stallworker: when it started and
// ended (0: never, as far as the records go) and why it ended early.
type stallSpan struct {
	worker, id string
	attempt    int
	start, end int64 // unix ns
	cause      string
}

// stallSpans reads the handlings the stallworkers recorded in ns:spans.
func (s *suite) stallSpans(t *testing.T) []*stallSpan {
	t.Helper()
	lines, err := s.rdb.LRange(s.ctx, s.ns+":spans", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]*stallSpan{}
	var out []*stallSpan
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 5 {
			t.Fatalf("bad span record %q", l)
		}
		attempt, err1 := strconv.Atoi(f[3])
		at, err2 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad span record %q", l)
		}
		key := f[1] + " " + f[2] + " " + f[3]
		sp := by[key]
		if sp == nil {
			sp = &stallSpan{worker: f[1], id: f[2], attempt: attempt}
			by[key] = sp
			out = append(out, sp)
		}
		switch {
		case f[0] == "start":
			sp.start = at
		case f[0] == "end" && len(f) == 6:
			sp.end, sp.cause = at, f[5]
		default:
			t.Fatalf("bad span record %q", l)
		}
	}
	return out
}

// enqueueStall enqueues n stall jobs with ids prefix0, prefix1, ... that
// hold their handler for hold (with first, on their first attempt only).
func (s *suite) enqueueStall(t *testing.T, prefix string, n int, hold time.Duration, first bool) []string {
	t.Helper()
	ids := make([]string, n)
	envs := make([]*job.Envelope, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
		e, err := stallType.Envelope(stallArgs{N: i, HoldMS: int(hold.Milliseconds()), First: first}, job.ID(ids[i]))
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	if err := s.b.Enqueue(s.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// handedBackRE finds how many prefetched jobs a worker handed back because
// their leases may have run out, in its log.
var handedBackRE = regexp.MustCompile(`"released":(\d+),[^\n]*handed back prefetched jobs unrun`)

// TestStalledWorkerStartsNoPrefetchedJob stops a worker with the default
// worker.Options (adaptive prefetch, Concurrency 10, Lease 30 s) with
// SIGSTOP while it holds 100 prefetched jobs (a claim its adaptive
// prefetch sized) behind ten handlers that hold its goroutines, for longer
// than its lease. Another worker reaps the leases and runs those jobs; then
// the first is resumed with SIGCONT, its goroutines free at once. It
// starts none of them: each is handed back (its release fenced), by the
// stall check or as a goroutine comes free. (Without the check it ran
// nearly all of them a second time.)
func TestStalledWorkerStartsNoPrefetchedJob(t *testing.T) {
	skipSlow(t)
	bin := buildCommand(t, "stallworker")
	srv := startServer(t)
	const ns, queue = "stalled", naming.DefaultQueue
	s := newSuite(t, srv, ns, queue)
	url := "redis://" + srv.Addr() + "/0"
	processing := testkit.Key(t, s.b, queue, "processing")
	// The stalled worker reaches Redis 5 ms away each way, as across a
	// data centre: its claims' round trip (over 10 ms) against its
	// handlers' time (well under 1 ms, even on a loaded machine) makes the
	// adaptive prefetch its full 100 whatever the load.
	far := faultproxy.Start(t, srv.Addr())
	far.Slow(5*time.Millisecond, time.Hour)
	w1 := startStallWorker(t, bin, "redis://"+far.Addr()+"/0", ns, "w1", "STALLWORKER_DEFAULTS=1", "STALLWORKER_DEBUG=1")

	// Fast jobs first: the adaptive prefetch measures a claim's round trip
	// and a handler's time, and grows to its full depth of 100.
	warm := s.enqueueStall(t, "warm", 3000, 0, false)
	s.waitDrained(t, queue, 60*time.Second)

	spans := func() []*stallSpan { return s.stallSpans(t) }
	startedBy := func(worker string, ids []string, after int64) []string {
		var out []string
		for _, sp := range spans() {
			if sp.worker == worker && sp.start > after && slices.Contains(ids, sp.id) {
				out = append(out, sp.id)
			}
		}
		return out
	}
	var prefetched, blockers []string
	var stopAt time.Time
	for try := 1; ; try++ {
		// Ten handlers hold the worker's ten goroutines for 5 s (their
		// later attempts, elsewhere, return at once); the hundred jobs due
		// behind them are prefetched. When the worker resumes, the 5 s have
		// passed: its goroutines come free at once and find the prefetched
		// jobs in line, as those of a worker stopped amid fast handlers do.
		blockers = s.enqueueStall(t, fmt.Sprintf("block%d-", try), 10, 5*time.Second, true)
		redistest.WaitFor(t, 10*time.Second, "the blockers running", func() bool { return len(startedBy("w1", blockers, 0)) == 10 })
		claims := w1.logged(t, `"jobs":100,`, `"message":"jobs claimed"`)
		jobs := s.enqueueStall(t, fmt.Sprintf("pre%d-", try), 150, 0, false)
		// Stopped once it holds them: a claim of 100 taken into its slots
		// (it logs that after). The adaptive prefetch sized that claim.
		redistest.WaitFor(t, 10*time.Second, "a claim of 100 held", func() bool {
			return w1.logged(t, `"jobs":100,`, `"message":"jobs claimed"`) > claims
		})
		stopAt = w1.stop(t)
		held, err := s.rdb.ZRange(s.ctx, processing, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		started := startedBy("w1", jobs, 0)
		prefetched = prefetched[:0]
		for _, id := range held {
			if slices.Contains(jobs, id) && !slices.Contains(started, id) {
				prefetched = append(prefetched, id)
			}
		}
		if len(prefetched) >= 100 {
			break
		}
		// The heartbeat saw the blockers run long and shrank the prefetch
		// before the stop (its tick fell in the few ms in between).
		if try == 3 {
			t.Fatalf("%d prefetched jobs held at the stop, three times; want 100", len(prefetched))
		}
		t.Logf("try %d: %d prefetched jobs held at the stop; again", try, len(prefetched))
		w1.resume(t)
		s.waitDrained(t, queue, 60*time.Second)
	}

	// Another worker reaps the stalled one's leases once they run out
	// (30 s) and runs the jobs.
	w2 := startStallWorker(t, bin, url, ns, "w2", "STALLWORKER_DEFAULTS=1")
	redistest.WaitFor(t, 120*time.Second, "the other worker ran the prefetched jobs", func() bool {
		return len(startedBy("w2", prefetched, 0)) >= len(prefetched)
	})
	contAt := w1.resume(t)
	stall := contAt.Sub(stopAt)
	redistest.WaitFor(t, 30*time.Second, "the resumed worker's handlers ended", func() bool {
		n := 0
		for _, sp := range spans() {
			if sp.worker == "w1" && sp.start < stopAt.UnixNano() && sp.end > 0 && slices.Contains(blockers, sp.id) {
				n++
			}
		}
		return n == len(blockers)
	})
	s.waitDrained(t, queue, 60*time.Second)
	w1.signal(syscall.SIGTERM, 10*time.Second)
	w2.signal(syscall.SIGTERM, 10*time.Second)

	var again []string
	ok := map[string]bool{}
	for _, sp := range spans() {
		if sp.worker == "w1" && sp.start > stopAt.UnixNano() && slices.Contains(prefetched, sp.id) {
			again = append(again, sp.id)
		}
		if sp.cause == "-" {
			ok[sp.id] = true
		}
	}
	if len(again) > 0 {
		t.Errorf("the resumed worker started %d of its %d prefetched jobs, which another worker had run: %v", len(again), len(prefetched), again)
	}
	for _, id := range append(slices.Clone(prefetched), warm...) {
		if !ok[id] {
			t.Errorf("job %s never ran to its end", id)
		}
	}
	ranElsewhere := len(startedBy("w2", prefetched, 0))
	handedBack := 0
	if b, err := os.ReadFile(w1.log); err == nil {
		for _, m := range handedBackRE.FindAllSubmatch(b, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			handedBack += n
		}
	}
	if dead := s.finish(t, []string{queue}, ns+":spans"); dead != 0 {
		t.Errorf("%d dead records", dead)
	}
	summary(t, "config", "worker.Options defaults (Concurrency 10, adaptive prefetch, Lease 30s)", "prefetched at the stop", len(prefetched),
		"stopped for", stall.Round(time.Millisecond), "run by the other worker", ranElsewhere,
		"started by the stalled worker after SIGCONT", len(again), "handed back by its stall check", handedBack,
		"handed back as its goroutines came free", len(prefetched)-handedBack)
}

// TestStalledWorkerKeepsCaps stops a worker with SIGSTOP while it runs as
// many handlers as a concurrency cap allows (a queue's cap of 1, a type's
// cap of 3), for longer than its 2 s lease; another worker takes the cap's
// slots once the leases run out, and the first is resumed while those run.
// Counting every handler from its start to its end, except the tails of
// the handlers that were running when the worker stopped (from SIGCONT to
// their end), no more handlers than the cap ever run at once: the resumed
// worker starts nothing it may no longer hold, prefetched or not. The tails
// end the moment the worker runs again (cause worker.ErrLeaseStale, before
// any round trip to Redis); the summary says how long they lasted.
func TestStalledWorkerKeepsCaps(t *testing.T) {
	skipSlow(t)
	bin := buildCommand(t, "stallworker")
	for _, tc := range []struct {
		name, typ string
		cap       int
	}{
		{"queue cap 1", "", 1},
		{"type cap 3", stallType.Name(), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t)
			const ns, queue = "stallcap", naming.DefaultQueue
			s := newSuite(t, srv, ns, queue)
			if err := s.b.SetConcurrency(s.ctx, queue, tc.typ, tc.cap); err != nil {
				t.Fatal(err)
			}
			// Handlers of 5 s: longer than the stop, so that those stopped
			// are still running when the worker resumes.
			jobs := s.enqueueStall(t, "c", 2*tc.cap+2, 5*time.Second, false)
			url := "redis://" + srv.Addr() + "/0"
			env := []string{"STALLWORKER_CONCURRENCY=" + strconv.Itoa(tc.cap+1), "STALLWORKER_PREFETCH=3", "STALLWORKER_LEASE=2s"}
			running := func(worker string) int {
				n := 0
				for _, sp := range s.stallSpans(t) {
					if sp.worker == worker && sp.end == 0 {
						n++
					}
				}
				return n
			}
			w1 := startStallWorker(t, bin, url, ns, "w1", env...)
			redistest.WaitFor(t, 10*time.Second, "the first worker at the cap", func() bool { return running("w1") == tc.cap })
			stopAt := w1.stop(t)
			w2 := startStallWorker(t, bin, url, ns, "w2", env...)
			redistest.WaitFor(t, 30*time.Second, "the second worker at the cap", func() bool { return running("w2") == tc.cap })
			time.Sleep(300 * time.Millisecond) // into the second worker's 5 s handlers
			contAt := w1.resume(t)
			s.waitDrained(t, queue, 90*time.Second)
			w1.signal(syscall.SIGTERM, 10*time.Second)
			w2.signal(syscall.SIGTERM, 10*time.Second)

			type event struct {
				at    int64
				delta int
			}
			var events []event
			var tail time.Duration
			stalled := map[string]int{}
			ok := map[string]bool{}
			for _, sp := range s.stallSpans(t) {
				if sp.end == 0 {
					t.Fatalf("handler %s of %s (attempt %d) never ended", sp.worker, sp.id, sp.attempt)
				}
				if sp.cause == "-" {
					ok[sp.id] = true
				}
				end := sp.end
				if sp.worker == "w1" && sp.start < stopAt.UnixNano() && sp.end > contAt.UnixNano() {
					// Running when the worker stopped: it counts until the
					// stop; its tail after SIGCONT is measured apart.
					stalled[sp.cause]++
					tail = max(tail, time.Duration(sp.end-contAt.UnixNano()))
					end = stopAt.UnixNano()
				}
				events = append(events, event{sp.start, +1}, event{end, -1})
			}
			slices.SortFunc(events, func(a, b event) int {
				if a.at != b.at {
					return int(a.at - b.at)
				}
				return a.delta - b.delta
			})
			n, most := 0, 0
			for _, e := range events {
				n += e.delta
				most = max(most, n)
			}
			if most > tc.cap {
				t.Errorf("%d handlers ran at once under a cap of %d", most, tc.cap)
			}
			if most < tc.cap {
				t.Errorf("at most %d handlers ran at once: the cap of %d was never reached, so this run shows nothing", most, tc.cap)
			}
			if stalled["stale"] != tc.cap {
				t.Errorf("the handlers running at the stop ended as %v; want %d cancelled as stale on resume", stalled, tc.cap)
			}
			for _, id := range jobs {
				if !ok[id] {
					t.Errorf("job %s never ran to its end", id)
				}
			}
			if err := s.b.SetConcurrency(s.ctx, queue, tc.typ, 0); err != nil {
				t.Fatal(err)
			}
			if dead := s.finish(t, []string{queue}, ns+":spans"); dead != 0 {
				t.Errorf("%d dead records", dead)
			}
			summary(t, "cap", tc.cap, "config", fmt.Sprintf("Concurrency %d, Prefetch 3, Lease 2s", tc.cap+1), "stopped for", contAt.Sub(stopAt).Round(time.Millisecond),
				"most running at once (stalled handlers until the stop)", most, "stalled handlers cancelled on resume", stalled["stale"],
				"longest stalled handler's run after SIGCONT", tail.Round(time.Microsecond))
		})
	}
}
