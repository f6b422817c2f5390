package worker_test

import (
	"context"
	"encoding/json"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/worker"
)

// BenchmarkBurstDrain measures one worker with concurrency 100 draining
// 10,000 jobs that are all due when it starts, against the real
// redis-server: claims, handler starts and batched acks. The jobs are
// enqueued with the timer stopped; the timer runs from the worker's start
// until the last handler has run, so ns/op is per drain of 10,000 jobs and
// jobs/s is the drain rate; redis-us/job is the server's CPU per job over
// the same span; jobs/claim and jobs/ack are the mean batch sizes. Compare runs with benchstat.
func BenchmarkBurstDrain(b *testing.B) { benchDrain(b, 10_000, 0, keyCap) }

// BenchmarkDrainKeys is the cost of per-key flow control at 100,000 active
// keys: 200,000 due jobs drained as BenchmarkBurstDrain drains, "unkeyed"
// without keys or key caps, "100k-keys" two jobs for each of 100,000 keys
// (job.Key) under a default key cap of 1 (SetKeyConcurrency), so that each
// key's second job is held while its first runs and released by its ack,
// "100k-keys-turns" the same keyed jobs under fair turns between keys
// (SetKeyFairness) and no cap. With -count, they run alternately; compare
// their jobs/s.
func BenchmarkDrainKeys(b *testing.B) {
	b.Run("unkeyed", func(b *testing.B) { benchDrain(b, 200_000, 0, keyCap) })
	b.Run("100k-keys", func(b *testing.B) { benchDrain(b, 200_000, 100_000, keyCap) })
	b.Run("100k-keys-turns", func(b *testing.B) { benchDrain(b, 200_000, 100_000, keyTurns) })
}

// The control the keyed jobs of benchDrain run under.
const (
	keyCap   = iota // every key a cap of 1
	keyTurns        // fair turns between keys, no cap
)

// benchDrain drains jobs due jobs with one worker at concurrency 100; with
// keys > 0, job i has key i mod keys, under control (keyCap or keyTurns).
func benchDrain(b *testing.B, jobs, keys, control int) {
	rdb, ns := redistest.New(b)
	br, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	typ := job.New[json.RawMessage]("bench.drain")
	var handled atomic.Int64
	done := make(chan struct{}, 1)
	reg := job.NewRegistry()
	typ.Handle(reg, func(context.Context, *job.Job[json.RawMessage]) error {
		if handled.Add(1) == int64(jobs) {
			done <- struct{}{}
		}
		return nil
	})
	items := make([]job.Item[json.RawMessage], 1000)
	for i := range items {
		items[i].Args = json.RawMessage(`{"order_id":"ord-000123","amount_cents":4599}`)
	}
	ctx := context.Background()
	switch {
	case keys > 0 && control == keyCap:
		if err := br.SetKeyConcurrency(ctx, naming.DefaultQueue, "", 1); err != nil {
			b.Fatal(err)
		}
	case keys > 0 && control == keyTurns:
		if err := br.SetKeyFairness(ctx, naming.DefaultQueue, true); err != nil {
			b.Fatal(err)
		}
	}
	counted := &callCounter{}
	protocol.Intercept(b, br, func(p protocol.Broker) protocol.Broker { counted.Broker = p; return counted })
	var total time.Duration
	var cpu float64
	var run runCounts
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := 0; i < jobs; i += len(items) {
			for j := range items {
				if keys > 0 {
					items[j].Opts = []job.Option{job.Key("customer-" + strconv.Itoa((i+j)%keys))}
				}
			}
			if _, err := typ.EnqueueItems(ctx, br, items); err != nil {
				b.Fatal(err)
			}
		}
		handled.Store(0)
		w, err := worker.New(worker.Options{Broker: br, Registry: reg, Concurrency: 100})
		if err != nil {
			b.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		cpu0 := serverCPU(b, rdb)
		counts0 := readRunCounts()
		b.StartTimer()
		start := time.Now()
		go func() { ran <- w.Run(wctx) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("handled %d of %d jobs in 2 minutes", handled.Load(), jobs)
		}
		total += time.Since(start)
		b.StopTimer()
		cpu += serverCPU(b, rdb) - cpu0
		stop()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
		run = run.add(readRunCounts().sub(counts0))
		b.StartTimer()
	}
	b.ReportMetric(float64(jobs)*float64(b.N)/total.Seconds(), "jobs/s")
	b.ReportMetric(cpu*1e6/float64(jobs*b.N), "redis-us/job")
	b.ReportMetric(float64(jobs*b.N)/float64(counted.claims.Load()), "jobs/claim")
	b.ReportMetric(float64(jobs*b.N)/float64(counted.acks.Load()), "jobs/settle")
	b.ReportMetric(float64(run.bytes)/float64(jobs*b.N), "B/job")
	b.ReportMetric(float64(run.objects)/float64(jobs*b.N), "allocs/job")
	b.ReportMetric(float64(run.goroutines)/float64(jobs*b.N), "goroutines/job")
}

// runCounts are the runtime's cumulative counts of heap bytes and objects
// allocated and goroutines created (by the whole process).
type runCounts struct{ bytes, objects, goroutines uint64 }

func readRunCounts() runCounts {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return runCounts{m.TotalAlloc, m.Mallocs, s[0].Value.Uint64()}
}

func (a runCounts) sub(b runCounts) runCounts {
	return runCounts{a.bytes - b.bytes, a.objects - b.objects, a.goroutines - b.goroutines}
}

func (a runCounts) add(b runCounts) runCounts {
	return runCounts{a.bytes + b.bytes, a.objects + b.objects, a.goroutines + b.goroutines}
}

// callCounter counts the Claim and Settle calls a worker makes.
type callCounter struct {
	protocol.Broker
	claims, acks atomic.Int64
}

func (c *callCounter) Claim(ctx context.Context, s keyspace.Shard, w protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	c.claims.Add(1)
	return c.Broker.Claim(ctx, s, w, id, n, lease)
}

func (c *callCounter) Settle(ctx context.Context, s keyspace.Shard, w protocol.Caller, lane protocol.Lane, id string, ops []protocol.Op) ([]protocol.Settled, error) {
	c.acks.Add(1)
	return c.Broker.Settle(ctx, s, w, lane, id, ops)
}

// serverCPU returns the Redis server's CPU time (user + system) in seconds:
// on a shared machine a steadier measure of the server's work than wall time.
func serverCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	s, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", k, err)
			}
			total += f
		}
	}
	return total
}

// BenchmarkNextJobs drains parents that each declare one next job
// (job.Next), so every parent's ack enqueues a child: the cost of
// worker.Options.Enqueue. "nil" takes the plain path (the next jobs go
// with the ack); "passthrough" sets one middleware that only calls on, so
// the difference is the path Enqueue takes (each success enqueues through
// the chain and waits for its ack to be recorded); "tracing+metrics" sets
// middleware.EnqueueTracing and EnqueueMetrics with OpenTelemetry's
// no-op providers (what a program that never installs an SDK pays).
func BenchmarkNextJobs(b *testing.B) {
	for _, c := range []struct {
		name string
		mws  []job.EnqueueMiddleware
	}{
		{"enqueue=nil", nil},
		{"enqueue=passthrough", []job.EnqueueMiddleware{func(next job.Enqueuer) job.Enqueuer { return next }}},
		{"enqueue=tracing+metrics", []job.EnqueueMiddleware{middleware.EnqueueTracing(), middleware.EnqueueMetrics()}},
	} {
		b.Run(c.name, func(b *testing.B) { benchNextJobs(b, c.mws) })
	}
}

func benchNextJobs(b *testing.B, mws []job.EnqueueMiddleware) {
	const parents = 2_000
	rdb, ns := redistest.New(b)
	br, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	parent := job.New[json.RawMessage]("bench.parent")
	child := job.New[json.RawMessage]("bench.child")
	var handled atomic.Int64
	done := make(chan struct{}, 1)
	count := func() {
		if handled.Add(1) == 2*parents {
			done <- struct{}{}
		}
	}
	reg := job.NewRegistry()
	body := json.RawMessage(`{"order_id":"ord-000123","amount_cents":4599}`)
	parent.Handle(reg, func(ctx context.Context, j *job.Job[json.RawMessage]) error {
		env, err := child.Envelope(body, job.ID("c-"+j.ID))
		if err != nil {
			return err
		}
		if err := job.Next(ctx, env); err != nil {
			return err
		}
		count()
		return nil
	})
	child.Handle(reg, func(context.Context, *job.Job[json.RawMessage]) error { count(); return nil })
	args := make([]json.RawMessage, 500)
	for i := range args {
		args[i] = body
	}
	ctx := context.Background()
	var total time.Duration
	var run runCounts
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := 0; i < parents; i += len(args) {
			if _, err := parent.EnqueueItems(ctx, br, testkit.Items(args)); err != nil {
				b.Fatal(err)
			}
		}
		handled.Store(0)
		w, err := worker.New(worker.Options{Broker: br, Registry: reg, Concurrency: 100, Enqueue: mws})
		if err != nil {
			b.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		counts0 := readRunCounts()
		b.StartTimer()
		start := time.Now()
		go func() { ran <- w.Run(wctx) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("handled %d of %d jobs in 2 minutes", handled.Load(), 2*parents)
		}
		total += time.Since(start)
		b.StopTimer()
		stop()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
		run = run.add(readRunCounts().sub(counts0))
		b.StartTimer()
	}
	b.ReportMetric(float64(2*parents)*float64(b.N)/total.Seconds(), "jobs/s")
	b.ReportMetric(float64(run.bytes)/float64(parents*b.N), "B/parent")
	b.ReportMetric(float64(run.objects)/float64(parents*b.N), "allocs/parent")
}
