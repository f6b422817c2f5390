//go:build linux

package faulttest_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestChainsUnderWorkerCrashes runs 1,000 jobs, each with two next jobs
// (job.Then): one in its own queue (stored by the ack's script call) and
// one in queue "chained" (another slot: enqueued just before the ack),
// through faultworker processes (10 % transient failures), one worker
// SIGKILLed and replaced every 2 s. 1 % of the parents are poison (dead on
// their first handling). Afterwards: every next job of a parent that
// succeeded was enqueued exactly once (its handlings have at most one
// first attempt: a second enqueue would start at attempt 1 again) and ended
// succeeded, its first handling after the parent's successful one; no next
// job of a dead parent ever ran.
func TestChainsUnderWorkerCrashes(t *testing.T) {
	skipSlow(t)
	bin := buildFaultWorker(t)
	srv := startServer(t)
	const ns, parents = "faultchain", 1000
	queues := []string{naming.DefaultQueue, "chained"}
	s := newSuite(t, srv, ns, queues...)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	t.Logf("seed %d", seed)

	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	chained := job.New[crashArgs]("fault.chained", job.Queue("chained"), job.MaxRetries(6))
	poison := map[string]bool{}
	envs := make([]*job.Envelope, parents)
	for i := range envs {
		id := fmt.Sprintf("p%04d", i)
		here, err := typ.Envelope(crashArgs{N: i}, job.ID(id+"-here"))
		if err != nil {
			t.Fatal(err)
		}
		there, err := chained.Envelope(crashArgs{N: i}, job.ID(id+"-there"))
		if err != nil {
			t.Fatal(err)
		}
		a := crashArgs{N: i, Poison: rng.IntN(100) == 0}
		poison[id] = a.Poison
		// Spread over 10 s, so that workers die while chains go on.
		if envs[i], err = typ.Envelope(a, job.ID(id), job.In(time.Duration(rng.IntN(10_000))*time.Millisecond), job.Then(here, there)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.b.Enqueue(s.ctx, envs...); err != nil {
		t.Fatal(err)
	}

	url := "redis://" + srv.Addr() + "/0"
	drained := func() bool {
		for _, q := range queues {
			st, err := testkit.OneStats(s.b.Stats(s.ctx, q))
			if err != nil || st.Scheduled != 0 || st.Processing != 0 {
				return false
			}
		}
		return true
	}
	procs, kills, deadline := crashLoop(rng, func(name string) *workerProc {
		return startWorkerProc(t, bin, url, ns, name, "FAULTWORKER_CHAINED=1")
	}, drained)
	for _, q := range queues {
		s.waitDrained(t, q, time.Until(deadline)+30*time.Second)
	}
	for _, p := range procs {
		p.signal(syscall.SIGTERM, 10*time.Second)
	}

	lines, err := s.rdb.LRange(s.ctx, ns+":log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	succeeded := map[string]int{} // id -> log line of its success
	firstAttempts := map[string]int{}
	firstRun := map[string]int{}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("bad record %q", l)
		}
		id := f[0]
		if _, seen := firstRun[id]; !seen {
			firstRun[id] = i
		}
		if f[2] == "1" {
			firstAttempts[id]++
		}
		if f[3] == "ok" {
			if _, seen := succeeded[id]; !seen {
				succeeded[id] = i
			}
		}
	}
	deadParents, nexts := 0, 0
	for i := range parents {
		id := fmt.Sprintf("p%04d", i)
		_, ok := succeeded[id]
		if poison[id] {
			deadParents++
			if ok {
				t.Errorf("poison parent %s succeeded", id)
			}
		} else if !ok {
			t.Errorf("parent %s never succeeded", id)
		}
		for _, next := range []string{id + "-here", id + "-there"} {
			if !ok {
				if _, ran := firstRun[next]; ran {
					t.Errorf("next job %s of a dead parent ran", next)
				}
				continue
			}
			nexts++
			// A worker killed in the first attempt's handler leaves no
			// record of it: at most one.
			if firstAttempts[next] > 1 {
				t.Errorf("next job %s: %d first attempts, want at most 1 (enqueued once)", next, firstAttempts[next])
			}
			if _, done := succeeded[next]; !done {
				t.Errorf("next job %s never succeeded", next)
			}
			if firstRun[next] < succeeded[id] {
				t.Errorf("next job %s first ran at log line %d, before its parent's success at line %d", next, firstRun[next], succeeded[id])
			}
		}
	}
	summary(t, "parents", parents, "workers SIGKILLed", kills, "poison parents", deadParents,
		"next jobs", nexts, "next jobs enqueued twice", countOver(firstAttempts, 1), "log lines", len(lines))
}

// countOver counts the values of m above n.
func countOver(m map[string]int, n int) int {
	c := 0
	for _, v := range m {
		if v > n {
			c++
		}
	}
	return c
}
