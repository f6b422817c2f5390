package broker_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

var benchPayload = []byte(`{"order_id":"ord-000123","amount_cents":4599}`)

func benchBroker(b *testing.B) *broker.Broker {
	rdb, ns := redistest.New(b)
	br, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// redisCPU returns the server's CPU time (user + system) in seconds. On a
// shared machine it is a steadier measure of the work a script does than
// wall time, which counts the time the server waited for a core.
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
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

// reportRedisCPU adds the server's CPU per job as the metric redis-us/job.
func reportRedisCPU(b *testing.B, seconds float64, jobs int) {
	if jobs > 0 {
		b.ReportMetric(seconds*1e6/float64(jobs), "redis-us/job")
	}
}

// scriptTime returns the time the server spent running scripts (EVALSHA and
// EVAL, INFO commandstats) in µs, and the number of calls: the scripts' own
// work, without reading requests and writing replies, which on a virtual
// machine is most of a small request's cost.
func scriptTime(b *testing.B, rdb redis.UniversalClient) (usec, calls float64) {
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k != "cmdstat_evalsha" && k != "cmdstat_eval" {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			name, num, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(num, 64)
			switch name {
			case "usec":
				usec += f
			case "calls":
				calls += f
			}
		}
	}
	return usec, calls
}

// reportScriptTime adds the scripts' own time per call since (usec0,
// calls0) as the metric script-us/call.
func reportScriptTime(b *testing.B, rdb redis.UniversalClient, usec0, calls0 float64) {
	usec, calls := scriptTime(b, rdb)
	if calls > calls0 {
		b.ReportMetric((usec-usec0)/(calls-calls0), "script-us/call")
	}
}

func benchEnv(i int, delay time.Duration) *job.Envelope {
	return &job.Envelope{ID: "j" + strconv.Itoa(i), Queue: "bench", Type: "order.cancel", Payload: benchPayload, MaxRetries: 10, Delay: delay}
}

// BenchmarkEnqueue is one job per round trip, ready an hour after the
// server's time (job.In); BenchmarkEnqueueAt, at a time of its own
// (job.At), which the script need not read the server's clock for.
func BenchmarkEnqueue(b *testing.B)   { benchEnqueueOne(b, false) }
func BenchmarkEnqueueAt(b *testing.B) { benchEnqueueOne(b, true) }

func benchEnqueueOne(b *testing.B, at bool) {
	br := benchBroker(b)
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := redisCPU(b, br.Client())
	usec0, calls0 := scriptTime(b, br.Client())
	n := 0
	start := time.Now()
	for b.Loop() {
		env := benchEnv(n, time.Hour)
		if at {
			env.Delay, env.At = 0, start.Add(time.Hour+time.Duration(n)*time.Millisecond)
		}
		if err := br.Enqueue(ctx, env); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportRedisCPU(b, redisCPU(b, br.Client())-cpu0, n)
	reportScriptTime(b, br.Client(), usec0, calls0)
}

// BenchmarkEnqueueBatch100 is 100 jobs per round trip; ns/op is per job.
func BenchmarkEnqueueBatch100(b *testing.B) {
	br := benchBroker(b)
	ctx := context.Background()
	envs := make([]*job.Envelope, 100)
	b.ReportAllocs()
	cpu0 := redisCPU(b, br.Client())
	n := 0
	for b.Loop() {
		for j := range envs {
			envs[j] = benchEnv(n, time.Hour)
			n++
		}
		if err := br.Enqueue(ctx, envs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/job")
	reportRedisCPU(b, redisCPU(b, br.Client())-cpu0, n)
}

// BenchmarkClaimAck100 claims 100 due jobs and acks them: two round trips
// per 100 jobs. redis-us/job counts the server's CPU of the claim and the
// ack only (the enqueue runs with the timer stopped, between two INFO
// calls).
func BenchmarkClaimAck100(b *testing.B) {
	br := benchBroker(b)
	ctx := context.Background()
	envs := make([]*job.Envelope, 100)
	leases := make([]protocol.Lease, 0, 100)
	n := 0
	var cpu float64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for j := range envs {
			envs[j] = benchEnv(n, 0)
			n++
		}
		if err := br.Enqueue(ctx, envs...); err != nil {
			b.Fatal(err)
		}
		cpu0 := redisCPU(b, br.Client())
		b.StartTimer()
		res, err := testkit.Drive(br).Claim(ctx, "bench", 100, time.Minute)
		if err != nil || len(res.Jobs) != 100 {
			b.Fatalf("claimed %d: %v", len(res.Jobs), err)
		}
		leases = leases[:0]
		for _, c := range res.Jobs {
			leases = append(leases, c.Lease)
		}
		if err := testkit.Drive(br).Ack(ctx, leases...); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += redisCPU(b, br.Client()) - cpu0
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/job")
	reportRedisCPU(b, cpu, n)
}

// BenchmarkEnqueueParallel is single-job Enqueue calls from 8 goroutines at
// once (4 per GOMAXPROCS on this 2-core machine), as producers of a busy
// service would make them.
func BenchmarkEnqueueParallel(b *testing.B) { benchEnqueueParallel(b, broker.Options{}) }

// BenchmarkEnqueueCallRecords is BenchmarkEnqueueParallel with the call
// records of one answer per call kept (Options.ResendWindow, the default)
// and not kept (negative): what the record, one SET … PX per single
// enqueue, costs. With -count, the two run alternately.
func BenchmarkEnqueueCallRecords(b *testing.B) {
	b.Run("kept", func(b *testing.B) { benchEnqueueParallel(b, broker.Options{}) })
	b.Run("none", func(b *testing.B) { benchEnqueueParallel(b, broker.Options{ResendWindow: -1}) })
}

func benchEnqueueParallel(b *testing.B, o broker.Options) {
	rdb, ns := redistest.New(b)
	o.Namespace = ns
	br, err := broker.New(rdb, o)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	cpu0 := redisCPU(b, br.Client())
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Enqueue(ctx, benchEnv(int(next.Add(1)), time.Hour)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRedisCPU(b, redisCPU(b, br.Client())-cpu0, int(next.Load()))
}
