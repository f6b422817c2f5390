package worker

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// runnerPool drives slots as the worker does, without Redis: it hands
// tasks to slots.take and starts a runner (slots.serve) when take says so,
// counting the runners started.
type runnerPool struct {
	s       *slots
	max     int
	wg      sync.WaitGroup
	mu      sync.Mutex
	started int
	run     func(*task)
}

func (p *runnerPool) take(t *task) {
	if p.s.take(t, p.max) {
		p.mu.Lock()
		p.started++
		p.mu.Unlock()
		p.wg.Go(func() { p.s.serve(t, p.run) })
	}
}

func newTask(n int) *task {
	return &task{c: &protocol.Claimed{Lease: protocol.Lease{ID: "job-" + strconv.Itoa(n), Token: int64(n)}}, cancel: func(error) {}}
}

// waitParked waits until n runners are parked.
func waitParked(t *testing.T, s *slots, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		parked := len(s.parked)
		s.mu.Unlock()
		if parked == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runners parked, want %d", parked, n)
		}
		runtime.Gosched()
	}
}

// Jobs run on at most max runners, started as jobs come (while none is
// parked) and parked between jobs: waves of jobs, each after the last has
// run, reuse the same runners (no goroutine per job); a job handed to a
// parked runner goes to it, not into the line (so no prefetch trim or
// shutdown hands it back); jobs beyond the runners wait in line for them;
// the shutdown stops the parked runners at once and the busy ones after
// their job.
func TestRunnersParkBetweenJobsAndStopAtShutdown(t *testing.T) {
	const max, waves = 3, 10
	var mu sync.Mutex
	var ran []string
	var gate chan struct{} // each job waits for it: jobs of one wave overlap
	done := make(chan struct{}, 100)
	p := &runnerPool{s: newSlots(time.Minute, time.Second), max: max, run: func(t *task) {
		mu.Lock()
		g := gate
		mu.Unlock()
		<-g
		mu.Lock()
		ran = append(ran, t.c.ID)
		mu.Unlock()
		done <- struct{}{}
	}}
	newGate := func() chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		gate = make(chan struct{})
		return gate
	}
	n := 0
	for range waves {
		g := newGate()
		for range max {
			n++
			p.take(newTask(n))
		}
		close(g)
		for range max {
			<-done
		}
		waitParked(t, p.s, max)
	}
	if p.started != max {
		t.Fatalf("%d runners started for %d waves of %d jobs, want %d", p.started, waves, max, max)
	}
	if len(ran) != waves*max {
		t.Fatalf("%d jobs ran, want %d", len(ran), waves*max)
	}

	// All parked: the next jobs go to them directly; the line stays empty.
	g := newGate()
	for range max {
		n++
		p.take(newTask(n))
	}
	if back := p.s.trimLine(0); len(back) != 0 {
		t.Fatalf("%d jobs handed to parked runners were in line", len(back))
	}
	// Every runner busy: two more wait in line, and run on the same runners.
	p.take(newTask(n + 1))
	p.take(newTask(n + 2))
	p.s.mu.Lock()
	inLine := len(p.s.line)
	p.s.mu.Unlock()
	if inLine != 2 || p.started != max {
		t.Fatalf("%d in line and %d runners started, want 2 and %d", inLine, p.started, max)
	}
	close(g)
	for range max + 2 {
		<-done
	}
	mu.Lock()
	count := len(ran)
	mu.Unlock()
	if count != waves*max+max+2 || p.started != max {
		t.Fatalf("%d jobs ran on %d runners, want %d on %d", count, p.started, waves*max+max+2, max)
	}
	waitParked(t, p.s, max)

	// The shutdown: one runner busy, the others parked; the parked stop
	// at once, the busy one after its job.
	g = newGate()
	p.take(newTask(n + 3))
	waiting, _, _ := p.s.close()
	if len(waiting) != 0 {
		t.Fatalf("%d jobs handed back at shutdown, want none: the one taken runs", len(waiting))
	}
	p.s.mu.Lock()
	runners, parked := p.s.runners, len(p.s.parked)
	p.s.mu.Unlock()
	if runners != 1 || parked != 0 {
		t.Fatalf("at shutdown: %d runners counted, %d parked; want the busy one and none", runners, parked)
	}
	close(g)
	<-done
	p.wg.Wait()
	if p.s.runners != 0 || p.started != max {
		t.Fatalf("after the shutdown: %d runners counted, %d started; want 0 and %d", p.s.runners, p.started, max)
	}
}

// A prefetched job that goes stale in line (its one runner held its job
// for about a lease) stops the prefetch until a runner is done with its
// job: jobs claimed ahead again would only wait out their lease in line
// and be handed back, over and over.
func TestStaleLineStopsThePrefetchUntilARunnerFrees(t *testing.T) {
	lease := 400 * time.Millisecond
	s := newSlots(lease, lease/10)
	release := make(chan struct{})
	running := make(chan struct{})
	p := &runnerPool{s: s, max: 1, run: func(tk *task) {
		if ok, _ := s.startable(tk, tk.confirmed); ok && tk.c.Lease.ID == "job-0" {
			close(running)
			<-release
		}
		s.settle(tk)
	}}
	now := time.Now()
	for i := range 4 {
		tk := newTask(i)
		tk.confirmed = now
		p.take(tk)
	}
	<-running
	if !s.prefetching() {
		t.Fatal("prefetch stopped before anything went stale")
	}
	back, _ := s.stale(now.Add(lease))
	if len(back) != 3 {
		t.Fatalf("%d prefetched jobs handed back, want 3", len(back))
	}
	if s.prefetching() {
		t.Fatal("the prefetch goes on while the only runner is still busy")
	}
	close(release)
	waitParked(t, s, 1)
	if !s.prefetching() {
		t.Fatal("the prefetch stayed stopped after the runner was done with its job")
	}
	s.close()
	p.wg.Wait()
}

func keyedTask(n int, key string) *task {
	t := newTask(n)
	t.c.ID = key + strconv.Itoa(n)
	t.c.Envelope = &job.Envelope{Key: key}
	return t
}

// The line takes its jobs in turns between keys: a key whose job comes
// after another key's backlog waits behind one job of each key ahead of
// it, not behind the backlog; within a key, and for the jobs without a
// key (one key, ""), first in, first out. Jobs handed back from the line
// (the prefetch trimmed, a stale or lost lease, the shutdown) leave their
// key's turn, and no key is remembered once none of its jobs waits.
func TestLineTakesTurnsBetweenKeys(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	var gate chan struct{}
	done := make(chan struct{}, 100)
	p := &runnerPool{s: newSlots(time.Minute, time.Second), max: 1, run: func(t *task) {
		mu.Lock()
		g := gate
		ran = append(ran, t.c.ID)
		mu.Unlock()
		done <- struct{}{}
		<-g
	}}
	newGate := func() chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		gate = make(chan struct{})
		return gate
	}
	// The one runner runs A0 and waits; the rest wait in line.
	check := func(want ...string) {
		t.Helper()
		for range len(want) - 1 {
			<-done
		}
		mu.Lock()
		got := strings.Join(ran, " ")
		ran = nil
		mu.Unlock()
		if got != strings.Join(want, " ") {
			t.Fatalf("jobs ran in the order\n%s\nwant\n%s", got, strings.Join(want, " "))
		}
	}
	g := newGate()
	p.take(keyedTask(0, "A"))
	<-done
	for i := 1; i <= 5; i++ {
		p.take(keyedTask(i, "A"))
	}
	p.take(keyedTask(1, "B"))
	p.take(keyedTask(1, "C"))
	p.take(keyedTask(6, "A"))
	p.take(keyedTask(2, "B"))
	p.take(keyedTask(1, ""))
	p.take(keyedTask(2, ""))
	close(g)
	check("A0", "A1", "B1", "C1", "1", "A2", "B2", "2", "A3", "A4", "A5", "A6")
	waitParked(t, p.s, 1)

	// A key that comes back after the line emptied joins the turn of
	// the job that left last; a new key joins it too.
	g = newGate()
	p.take(keyedTask(10, "X"))
	<-done
	p.take(keyedTask(11, "X"))
	p.take(keyedTask(12, "X"))
	p.take(keyedTask(13, "X"))
	p.take(keyedTask(1, "Y"))
	p.take(keyedTask(14, "A"))
	// Handed back from the end of the line: the latest turns.
	back := p.s.trimLine(4)
	if len(back) != 1 || back[0].c.ID != "X13" {
		t.Fatalf("trimmed %d jobs (%v), want X13", len(back), back)
	}
	p.s.mu.Lock()
	x := p.s.turns["X"]
	p.s.mu.Unlock()
	if x.n != 2 {
		t.Fatalf("X counts %d jobs in line after the trim, want 2", x.n)
	}
	close(g)
	check("X10", "X11", "Y1", "A14", "X12")
	waitParked(t, p.s, 1)
	p.s.mu.Lock()
	left := len(p.s.turns)
	p.s.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d keys remembered with an empty line", left)
	}

	// The shutdown forgets the keys of the jobs it hands back.
	g = newGate()
	p.take(keyedTask(20, "A"))
	<-done
	p.take(keyedTask(21, "A"))
	p.take(keyedTask(2, "Y"))
	waiting, _, _ := p.s.close()
	if len(waiting) != 2 || len(p.s.turns) != 0 {
		t.Fatalf("at shutdown %d handed back and %d keys remembered, want 2 and 0", len(waiting), len(p.s.turns))
	}
	close(g)
	p.wg.Wait()
}
