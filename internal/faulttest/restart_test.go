package faulttest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// TestRedisRestarts kills redis-server (appendonly yes, appendfsync always)
// with SIGKILL twice while a producer enqueues and three workers handle
// jobs, restarting it on the same port and directory after a second each
// time. Nobody reconnects by hand. Every job whose Enqueue returned nil is
// handled or dead-lettered; jobs whose Enqueue failed may or may not have
// been stored (the reply can be lost after the write) and are counted.
func TestRedisRestarts(t *testing.T) {
	skipSlow(t)
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	const ns, queue = "restart", naming.DefaultQueue
	s := newSuite(t, srv, ns, queue)
	typ := job.New[crashArgs]("fault.restart", job.MaxRetries(20), job.Retry(retry.Constant(50*time.Millisecond)))

	var mu sync.Mutex
	handled := map[string]int{}
	reg := job.NewRegistry()
	typ.Handle(reg, func(ctx context.Context, j *job.Job[crashArgs]) error {
		time.Sleep(rand.N(3 * time.Millisecond))
		if rand.IntN(20) == 0 {
			return errors.New("transient failure")
		}
		mu.Lock()
		handled[j.ID]++
		mu.Unlock()
		return nil
	})
	var stops []func()
	for range 3 {
		b, err := broker.New(s.client(t, srv.Addr()), broker.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, runWorker(t, worker.Options{
			Broker: b, Registry: reg, Concurrency: 8, Lease: 2 * time.Second, MaxIdle: 500 * time.Millisecond,
		}))
	}

	// The producer enqueues batches of 10 for 9 seconds on its own client.
	producer, err := broker.New(s.client(t, srv.Addr()), broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var acked, uncertain []string
	var enqueueErrs int
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop := time.Now().Add(9 * time.Second)
		for n := 0; time.Now().Before(stop); {
			batch := make([]*job.Envelope, 10)
			for i := range batch {
				e, err := typ.Envelope(crashArgs{N: n}, job.ID(fmt.Sprintf("r%05d", n)), job.In(rand.N(2*time.Second)))
				if err != nil {
					panic(err)
				}
				batch[i] = e
				n++
			}
			err := producer.Enqueue(s.ctx, batch...)
			var be *job.BatchError
			for i, e := range batch {
				switch {
				case err == nil, errors.As(err, &be) && be.Errs[i] == nil:
					acked = append(acked, e.ID)
				default:
					uncertain = append(uncertain, e.ID)
				}
			}
			if err != nil {
				enqueueErrs++
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for range 2 {
		time.Sleep(3 * time.Second)
		srv.Kill()
		time.Sleep(time.Second)
		srv.Restart(t)
	}
	<-done
	s.waitDrained(t, queue, 60*time.Second)
	for _, stop := range stops {
		stop()
	}

	dead := map[string]bool{}
	for cur := (protocol.DeadCursor{}); ; {
		recs, next, err := protocol.Dead(s.b).Page(s.ctx, queue, cur, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			dead[r.ID] = true
		}
		if next.IsZero() {
			break
		}
		cur = next
	}
	var lost []string
	dups := 0
	for _, id := range acked {
		if handled[id] == 0 && !dead[id] {
			lost = append(lost, id)
		}
		dups += max(handled[id]-1, 0)
	}
	stored := 0
	for _, id := range uncertain {
		if handled[id] > 0 || dead[id] {
			stored++
		}
		dups += max(handled[id]-1, 0)
	}
	if len(lost) > 0 {
		t.Errorf("%d jobs whose Enqueue returned nil were lost, e.g. %v", len(lost), lost[:min(10, len(lost))])
	}
	if enqueueErrs == 0 {
		// The kills fall inside the producer's run either way; go-redis
		// retries can carry one call across a short outage.
		t.Log("no Enqueue call failed: each outage was bridged by client retries")
	}
	deadLeft := s.finish(t, []string{queue})
	summary(t, "restarts", 2, "jobs acknowledged by Enqueue", len(acked), "lost", len(lost),
		"Enqueue calls failed", enqueueErrs, "jobs of failed calls", fmt.Sprintf("%d (%d of them stored after all)", len(uncertain), stored),
		"duplicate successes", fmt.Sprintf("%d (acks lost with the connection, or leases run out while Redis was down)", dups),
		"dead", deadLeft)
}
