//go:build linux

package faulttest_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
)

// TestBatchCallbacksUnderWorkerCrashes runs two batches of 2,000 members
// each through faultworker processes (10 % transient failures), one
// worker SIGKILLed and replaced every 2 s. Batch "mixed" has 1 % poison
// members (dead on their first handling), batch "clean" none. Afterwards:
// each callback that is due was enqueued exactly once (its handlings have
// one first attempt: a second enqueue would start at attempt 1 again),
// after the last member ended (its first handling is logged after every
// member's last); the success callback of "mixed" never ran; the batch
// counts match the dead-letter store.
func TestBatchCallbacksUnderWorkerCrashes(t *testing.T) {
	skipSlow(t)
	bin := buildFaultWorker(t)
	srv := startServer(t)
	const ns, queue, members = "faultbatch", job.DefaultQueue, 2000
	s := newSuite(t, srv, ns, queue)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)

	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	callback := func() *job.Envelope {
		e, err := typ.Envelope(crashArgs{N: -1})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	poisoned := 0
	for _, name := range []string{"mixed", "clean"} {
		if _, err := s.b.CreateBatch(s.ctx, broker.BatchSpec{ID: name, OnSuccess: callback(), OnComplete: callback()}); err != nil {
			t.Fatal(err)
		}
		envs := make([]*job.Envelope, members)
		for i := range envs {
			a := crashArgs{N: i, Poison: name == "mixed" && rng.IntN(100) == 0}
			if a.Poison {
				poisoned++
			}
			// Spread over 10 s, so that workers die while members end.
			e, err := typ.Envelope(a, job.ID(fmt.Sprintf("%s%04d", name, i)), job.In(time.Duration(rng.IntN(10_000))*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			envs[i] = e
		}
		for i := 0; i < members; i += 500 {
			if err := s.b.AddToBatch(s.ctx, name, envs[i:i+500]...); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.b.SealBatch(s.ctx, name); err != nil {
			t.Fatal(err)
		}
	}

	url := "redis://" + srv.Addr() + "/0"
	done := func() bool {
		for _, name := range []string{"mixed", "clean"} {
			st, err := s.b.Batch(s.ctx, name)
			if err != nil || !st.CompleteFired {
				return false
			}
		}
		st, err := s.b.Stats(s.ctx, queue)
		return err == nil && st.Scheduled == 0 && st.Processing == 0
	}
	procs, kills, deadline := crashLoop(rng, func(name string) *workerProc { return startWorkerProc(t, bin, url, ns, name) }, done)
	s.waitDrained(t, queue, time.Until(deadline)+30*time.Second)
	for _, p := range procs {
		p.signal(syscall.SIGTERM, 10*time.Second)
	}

	lines, err := s.rdb.LRange(s.ctx, ns+":log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	lastMember := map[string]int{} // batch -> index of its last member handling
	firstCallback := map[string]int{}
	firstAttempts := map[string]int{}
	handlings := map[string]int{}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("bad record %q", l)
		}
		id := f[0]
		if strings.Contains(id, ":") {
			handlings[id]++
			if f[2] == "1" {
				firstAttempts[id]++
			}
			if _, seen := firstCallback[id]; !seen {
				firstCallback[id] = i
			}
			continue
		}
		lastMember[id[:5]] = i
	}
	dead := map[string]int{}
	for cur := (broker.DeadCursor{}); ; {
		recs, next, err := s.b.DeadPage(s.ctx, queue, cur, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if !strings.Contains(r.ID, ":") {
				dead[r.ID[:5]]++
			}
		}
		if next.IsZero() {
			break
		}
		cur = next
	}
	for _, name := range []string{"mixed", "clean"} {
		st, err := s.b.Batch(s.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Total != members || st.Dead != dead[name] || st.Succeeded != members-dead[name] || st.Pending != 0 {
			t.Errorf("batch %s: %+v, want %d members, %d dead as in the dead-letter store", name, st, members, dead[name])
		}
		for _, cb := range []string{broker.SuccessID(name), broker.CompleteID(name)} {
			want := 1
			if cb == broker.SuccessID(name) && dead[name] > 0 {
				want = 0
			}
			if firstAttempts[cb] != want {
				t.Errorf("callback %s: %d first attempts (%d handlings), want %d", cb, firstAttempts[cb], handlings[cb], want)
			}
			if want == 1 && firstCallback[cb] < lastMember[name] {
				t.Errorf("callback %s ran (log line %d) before the batch's last member (line %d)", cb, firstCallback[cb], lastMember[name])
			}
		}
		if fired := st.SuccessFired; fired != (dead[name] == 0) || !st.CompleteFired {
			t.Errorf("batch %s: success fired %v, complete fired %v, with %d dead", name, st.SuccessFired, st.CompleteFired, dead[name])
		}
	}
	if n, _ := s.rdb.HLen(s.ctx, ns+":{"+queue+"}:batched").Result(); n != 0 {
		t.Errorf("%d batch endings left uncounted", n)
	}
	summary(t, "members", 2*members, "workers SIGKILLed", kills, "poison", poisoned,
		"dead mixed", dead["mixed"], "dead clean", dead["clean"],
		"callback enqueues", fmt.Sprintf("%v", firstAttempts), "callback handlings", fmt.Sprintf("%v", handlings))
}
