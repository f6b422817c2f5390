//go:build linux

package faulttest_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/faultproxy"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
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
	const ns, queue, members = "faultbatch", naming.DefaultQueue, 2000
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
		st, err := testkit.OneStats(s.b.Stats(s.ctx, queue))
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
	for cur := (protocol.DeadCursor{}); ; {
		recs, next, err := protocol.Dead(s.b).Page(s.ctx, queue, cur, 1000)
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
		for _, cb := range []string{(name + ":success"), (name + ":complete")} {
			want := 1
			if cb == (name+":success") && dead[name] > 0 {
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

// TestBatchEndingsUnderFaults runs one batch of 2,000 members through
// faultworker processes (10 % transient failures) that reach Redis
// through a fault proxy, one SIGKILLed and replaced every 2 s, while its
// members end in every way a job can: a tenth cancelled while scheduled,
// a twentieth expired before they started (half dead-lettered, half
// dropped), 1 % poison (dead), and chain members (job.Then, no retries)
// some of whose next jobs' enqueue replies the proxy loses, every send, so
// that the member dies with its next job counted. Once the complete
// callback ran, the expired dead members are redriven and succeed.
// Afterwards: the complete callback was enqueued exactly once (one first
// attempt) and the success callback never; the batch's counts add up
// (nothing pending), its dead count equals the dead records of its members
// in both queues, its gone count the cancels and drops; no ending is left
// uncounted.
func TestBatchEndingsUnderFaults(t *testing.T) {
	skipSlow(t)
	bin := buildFaultWorker(t)
	srv := startServer(t)
	const ns, queue, members, batch = "faultends", naming.DefaultQueue, 2000, "faults"
	s := newSuite(t, srv, ns, queue, "chained")
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	t.Logf("seed %d", seed)
	proxy := faultproxy.Start(t, srv.Addr())

	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	chained := job.New[crashArgs]("fault.chained", job.Queue("chained"), job.MaxRetries(6))
	cb, err := typ.Envelope(crashArgs{N: -1})
	if err != nil {
		t.Fatal(err)
	}
	cb2, err := typ.Envelope(crashArgs{N: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.b.CreateBatch(s.ctx, broker.BatchSpec{ID: batch, OnSuccess: cb, OnComplete: cb2}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var cancels []string
	var dropped, lostNext int
	envs := make([]*job.Envelope, members)
	for i := range envs {
		id := fmt.Sprintf("m%04d", i)
		opts := []job.Option{job.ID(id)}
		a := crashArgs{N: i}
		switch {
		case i%10 == 0: // cancelled before it is due
			opts = append(opts, job.In(6*time.Second+time.Duration(rng.IntN(4000))*time.Millisecond))
			cancels = append(cancels, id)
		case i%20 == 1: // expired before it started
			opts = append(opts, job.At(now.Add(-2*time.Second)), job.ExpireAt(now.Add(-time.Second)))
			if i%40 == 1 {
				opts = append(opts, job.DropExpired())
				dropped++
			}
		case i%25 == 2: // a chain member without retries
			next, err := chained.Envelope(crashArgs{N: -2}, job.ID("next-"+id))
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, job.Then(next), job.MaxRetries(0), job.In(time.Duration(rng.IntN(10_000))*time.Millisecond))
			if i%50 == 2 {
				// Every send of its next job's enqueue loses its reply
				// (go-redis sends a command up to 4 times).
				for range 6 {
					proxy.DropReply(func(cmd []string) bool {
						return slices.Contains(cmd, "next-"+id) && slices.ContainsFunc(cmd, func(a string) bool { return strings.HasSuffix(a, ":c:") })
					})
				}
				lostNext++
			}
		default:
			a.Poison = rng.IntN(100) == 0
			opts = append(opts, job.In(time.Duration(rng.IntN(10_000))*time.Millisecond))
		}
		e, err := typ.Envelope(a, opts...)
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	for i := 0; i < members; i += 500 {
		if err := s.b.AddToBatch(s.ctx, batch, envs[i:i+500]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.b.SealBatch(s.ctx, batch); err != nil {
		t.Fatal(err)
	}
	// The cancels run while the workers start and die.
	cancelled := make(chan int, 1)
	go func() {
		n := 0
		time.Sleep(time.Second)
		for _, id := range cancels {
			// A job found running (a slow loop) is only asked to stop:
			// it ends dead or succeeded, not gone.
			if c, err := s.b.Cancel(s.ctx, queue, id); err == nil && !c.Running {
				n++
			}
		}
		cancelled <- n
	}()

	url := "redis://" + proxy.Addr() + "/0"
	done := func() bool {
		st, err := s.b.Batch(s.ctx, batch)
		if err != nil || !st.CompleteFired {
			return false
		}
		for _, q := range []string{queue, "chained"} {
			if st, err := testkit.OneStats(s.b.Stats(s.ctx, q)); err != nil || st.Scheduled != 0 || st.Processing != 0 {
				return false
			}
		}
		return true
	}
	procs, kills, deadline := crashLoop(rng, func(name string) *workerProc {
		return startWorkerProc(t, bin, url, ns, name, "FAULTWORKER_CHAINED=1")
	}, done)
	cancelledN := <-cancelled
	// The expired dead members are redriven (without their expiry) and
	// succeed: they move from Dead to Succeeded, and fire nothing again.
	var expired []string
	for cur := (protocol.DeadCursor{}); ; {
		recs, next, err := protocol.Dead(s.b).Page(s.ctx, queue, cur, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Reason == broker.ReasonExpired {
				expired = append(expired, r.ID)
			}
		}
		if next.IsZero() {
			break
		}
		cur = next
	}
	if err := deadletter.New(s.b).Redrive(s.ctx, queue, 0, expired...); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{queue, "chained"} {
		s.waitDrained(t, q, time.Until(deadline)+30*time.Second)
	}
	redistest.WaitFor(t, 30*time.Second, "the redriven members counted", func() bool {
		n, err := s.rdb.HLen(s.ctx, ns+":{"+queue+"}:batched").Result()
		return err == nil && n == 0
	})
	for _, p := range procs {
		p.signal(syscall.SIGTERM, 10*time.Second)
	}

	lines, err := s.rdb.LRange(s.ctx, ns+":log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	firstAttempts, handlings := map[string]int{}, map[string]int{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 4 && strings.Contains(f[0], ":") {
			handlings[f[0]]++
			if f[2] == "1" {
				firstAttempts[f[0]]++
			}
		}
	}
	dead := 0
	for _, q := range []string{queue, "chained"} {
		for cur := (protocol.DeadCursor{}); ; {
			recs, next, err := protocol.Dead(s.b).Page(s.ctx, q, cur, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if r.Envelope != nil && r.Envelope.Batch == batch {
					dead++
				}
			}
			if next.IsZero() {
				break
			}
			cur = next
		}
	}
	st, err := s.b.Batch(s.ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.Succeeded+st.Dead+st.Gone != st.Total || st.Dead != dead || st.Gone != cancelledN+dropped || !st.CompleteFired || st.SuccessFired {
		t.Errorf("batch %+v; want nothing pending, %d dead as in the dead letters, %d gone (%d cancelled, %d dropped), complete fired only", st, dead, cancelledN+dropped, cancelledN, dropped)
	}
	if firstAttempts[(batch+":complete")] != 1 || firstAttempts[(batch+":success")] != 0 {
		t.Errorf("callbacks enqueued %v (handlings %v), want the complete callback once and the success callback never", firstAttempts, handlings)
	}
	for _, q := range []string{queue, "chained"} {
		if n, _ := s.rdb.HLen(s.ctx, ns+":{"+q+"}:batched").Result(); n != 0 {
			t.Errorf("queue %s: %d batch endings left uncounted", q, n)
		}
	}
	summary(t, "members", members, "workers SIGKILLed", kills, "cancelled", cancelledN, "expired dropped", dropped,
		"expired redriven", len(expired), "next jobs with lost replies", lostNext, "batch", fmt.Sprintf("%+v", *st),
		"callback enqueues", fmt.Sprintf("%v", firstAttempts))
}
