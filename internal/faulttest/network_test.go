package faulttest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/faultproxy"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// fenceWatch wraps a worker's broker to see its claims and its acks that
// were refused for a lost lease.
type fenceWatch struct {
	protocol.Broker
	mu      sync.Mutex
	attempt map[protocol.Lease]int
	fenced  []fencedAck
}

type fencedAck struct {
	id      string
	attempt int
}

func (f *fenceWatch) Claim(ctx context.Context, sh keyspace.Shard, w protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	res, err := f.Broker.Claim(ctx, sh, w, id, n, lease)
	f.mu.Lock()
	for _, c := range res.Jobs {
		f.attempt[c.Lease] = c.Attempt
	}
	f.mu.Unlock()
	return res, err
}

func (f *fenceWatch) Settle(ctx context.Context, sh keyspace.Shard, w protocol.Caller, lane protocol.Lane, id string, ops []protocol.Op) ([]protocol.Settled, error) {
	res, err := f.Broker.Settle(ctx, sh, w, lane, id, ops)
	f.mu.Lock()
	for i, r := range res {
		if ops[i].Kind == protocol.OpAck && errors.Is(r.Err, broker.ErrLeaseLost) {
			f.fenced = append(f.fenced, fencedAck{ops[i].Lease.ID, f.attempt[ops[i].Lease]})
		}
	}
	f.mu.Unlock()
	return res, err
}

// TestNetworkFaults puts a TCP proxy between each of three workers and
// Redis, and for 10 seconds drops all of a worker's connections, stalls them
// (up to 2.5 s, past the 1 s lease) or slows them, at random. No job is lost;
// no attempt is delivered twice; and an ack from a worker whose lease ran
// out while it was cut off is refused (fenced), the job having been handled
// again on a later attempt.
func TestNetworkFaults(t *testing.T) {
	skipSlow(t)
	srv := startServer(t)
	const ns, queue, total = "net", naming.DefaultQueue, 3000
	s := newSuite(t, srv, ns, queue)
	typ := job.New[crashArgs]("fault.net", job.MaxRetries(20), job.Retry(retry.Constant(50*time.Millisecond)))
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)

	type run struct {
		worker  int
		attempt int
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	proxies := make([]*faultproxy.Proxy, 3)
	watches := make([]*fenceWatch, 3)
	var stops []func()
	// armed asks worker 0's next handler to stall its proxy past the lease
	// just before it returns, so that the job's ack is certainly held back
	// while its lease runs out (a stall at a random moment may find worker
	// 0 holding no job).
	var armed atomic.Bool
	stalled := make(chan struct{})
	for i := range proxies {
		proxies[i] = faultproxy.Start(t, srv.Addr())
		b, err := broker.New(s.client(t, proxies[i].Addr()), broker.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		watches[i] = &fenceWatch{attempt: map[protocol.Lease]int{}}
		protocol.Intercept(t, b, func(p protocol.Broker) protocol.Broker { watches[i].Broker = p; return watches[i] })
		w := i
		wreg := job.NewRegistry()
		typ.Handle(wreg, func(ctx context.Context, j *job.Job[crashArgs]) error {
			time.Sleep(rand.N(20 * time.Millisecond))
			mu.Lock()
			runs[j.ID] = append(runs[j.ID], run{w, j.Attempt})
			mu.Unlock()
			if w == 0 && armed.CompareAndSwap(true, false) {
				proxies[0].Stall(2500 * time.Millisecond)
				close(stalled)
			}
			return nil
		})
		stops = append(stops, runWorker(t, worker.Options{
			Broker: b, Registry: wreg, Concurrency: 8,
			Lease: time.Second, HeartbeatInterval: 250 * time.Millisecond, ReapInterval: 300 * time.Millisecond,
			MaxIdle: 300 * time.Millisecond,
		}))
	}

	envs := make([]*job.Envelope, total)
	for i := range envs {
		e, err := typ.Envelope(crashArgs{N: i}, job.ID(fmt.Sprintf("n%05d", i)), job.In(time.Duration(rng.IntN(9000))*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	if err := s.b.Enqueue(s.ctx, envs...); err != nil {
		t.Fatal(err)
	}

	var drops, dropped, stalls, slows int
	var longest time.Duration
	end := time.Now().Add(10 * time.Second)
	// The first fault is a stall past the lease, started by worker 0's
	// handler once jobs are flowing, so that the ack of the job it is
	// finishing waits behind it: fencing is always tried.
	time.Sleep(time.Second)
	armed.Store(true)
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("worker 0 ran no job to stall its proxy from")
	}
	stalls, longest = 1, 2500*time.Millisecond
	time.Sleep(time.Second)
	for time.Now().Before(end) {
		p := proxies[rng.IntN(len(proxies))]
		switch rng.IntN(3) {
		case 0:
			drops++
			dropped += p.Drop()
		case 1:
			d := 500*time.Millisecond + time.Duration(rng.IntN(2000))*time.Millisecond
			stalls++
			longest = max(longest, d)
			p.Stall(d)
		case 2:
			slows++
			p.Slow(time.Duration(10+rng.IntN(50))*time.Millisecond, time.Second+time.Duration(rng.IntN(1000))*time.Millisecond)
		}
		time.Sleep(300*time.Millisecond + time.Duration(rng.IntN(900))*time.Millisecond)
	}
	s.waitDrained(t, queue, 60*time.Second)
	for _, stop := range stops {
		stop()
	}
	for _, p := range proxies {
		p.Close()
	}

	var lost []string
	dups := 0
	for _, e := range envs {
		rs := runs[e.ID]
		if len(rs) == 0 {
			if _, err := deadletter.New(s.b).Get(s.ctx, queue, e.ID); err != nil {
				lost = append(lost, e.ID)
			}
		}
		dups += max(len(rs)-1, 0)
		seen := map[int]bool{}
		for _, r := range rs {
			if seen[r.attempt] {
				t.Errorf("job %s delivered twice on attempt %d: %v", e.ID, r.attempt, rs)
			}
			seen[r.attempt] = true
		}
	}
	// A refused ack is either a stale worker fenced out (the job ran again
	// on a later attempt) or go-redis resending an ack whose first send
	// landed but whose reply was lost with a dropped connection (then the
	// job is finished: no later attempt, no dead record, queue drained).
	fenced, resent := 0, 0
	for _, w := range watches {
		for _, f := range w.fenced {
			later := false
			for _, r := range runs[f.id] {
				later = later || r.attempt > f.attempt
			}
			_, deadErr := deadletter.New(s.b).Get(s.ctx, queue, f.id)
			switch {
			case later:
				fenced++
			case deadErr != nil:
				resent++
			default:
				t.Errorf("ack of job %s (attempt %d) was refused, no later attempt ran and it is dead: %v", f.id, f.attempt, runs[f.id])
			}
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d jobs lost, e.g. %v", len(lost), lost[:min(10, len(lost))])
	}
	if fenced == 0 {
		t.Error("no stale ack was fenced: no lease ran out during a stall")
	}
	deadLeft := s.finish(t, []string{queue})
	summary(t, "jobs", total, "faults", fmt.Sprintf("%d drops (%d connections), %d stalls (longest %v), %d slowdowns", drops, dropped, stalls, longest, slows),
		"lost", len(lost), "stale acks fenced", fmt.Sprintf("%d (each job handled again on a later attempt)", fenced),
		"acks refused on resend", fmt.Sprintf("%d (first send landed, reply lost with the connection)", resent),
		"duplicate handlings", fmt.Sprintf("%d (leases run out while cut off)", dups), "dead", deadLeft)
}
