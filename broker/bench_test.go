package broker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
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

func benchEnv(i int, delay time.Duration) *job.Envelope {
	return &job.Envelope{ID: "j" + strconv.Itoa(i), Queue: "bench", Type: "order.cancel", Payload: benchPayload, MaxRetries: 10, Delay: delay}
}

// BenchmarkEnqueue is one job per round trip.
func BenchmarkEnqueue(b *testing.B) {
	br := benchBroker(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := br.Enqueue(ctx, benchEnv(i, time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueueBatch100 is 100 jobs per round trip; ns/op is per job.
func BenchmarkEnqueueBatch100(b *testing.B) {
	br := benchBroker(b)
	ctx := context.Background()
	envs := make([]*job.Envelope, 100)
	b.ReportAllocs()
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
}

// BenchmarkClaimAck100 claims 100 due jobs and acks them: two round trips
// per 100 jobs.
func BenchmarkClaimAck100(b *testing.B) {
	br := benchBroker(b)
	ctx := context.Background()
	envs := make([]*job.Envelope, 100)
	leases := make([]broker.Lease, 0, 100)
	n := 0
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
		b.StartTimer()
		res, err := br.Claim(ctx, "bench", 100, time.Minute)
		if err != nil || len(res.Jobs) != 100 {
			b.Fatalf("claimed %d: %v", len(res.Jobs), err)
		}
		leases = leases[:0]
		for _, c := range res.Jobs {
			leases = append(leases, c.Lease)
		}
		if err := br.Ack(ctx, leases...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/job")
}
