package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// BenchmarkSettleKill100Keep is BenchmarkSettleKill100's "at-cap" for a
// worker with worker.Options.OnDeadTrimmed: each trimmed record is moved to
// the shard's trimmed list in the same call (taken back out between calls,
// untimed, as the hook's goroutine would).
func BenchmarkSettleKill100Keep(b *testing.B) {
	rdb, ns := redistest.New(b)
	br, err := broker.New(rdb, broker.Options{Namespace: ns, DeadCap: 1000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	caller := protocol.Caller{ID: "bench", Lease: time.Minute, KeepTrimmed: 1000}
	p := protocol.For(br)
	envs := make([]*job.Envelope, 100)
	ops := make([]protocol.Op, 0, 100)
	n := 0
	round := func() {
		for j := range envs {
			envs[j] = benchEnv(n, 0)
			n++
		}
		if err := br.Enqueue(ctx, envs...); err != nil {
			b.Fatal(err)
		}
		res, err := testkit.Drive(br).Claim(ctx, "bench", 100, time.Minute)
		if err != nil || len(res.Jobs) != 100 {
			b.Fatalf("claimed %d: %v", len(res.Jobs), err)
		}
		ops = ops[:0]
		for _, j := range res.Jobs {
			ops = append(ops, protocol.Op{Kind: protocol.OpKill, Lease: j.Lease,
				Death: protocol.Death{Type: j.Envelope.Type, Body: j.Body, Error: "permanent: card declined", Attempts: 1}})
		}
	}
	shard := testkit.Shards(b, br, "bench")
	settle := func() int64 {
		res, err := p.Settle(ctx, ops[0].Lease.Shard, caller, protocol.LaneSettle, job.NewID(), ops)
		if err != nil {
			b.Fatal(err)
		}
		var kept int64
		for _, r := range res {
			if r.Trims != nil {
				kept += r.Trims.Kept
			}
		}
		return kept
	}
	for range 10 {
		round()
		settle()
	}
	var usec, calls float64
	jobs := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, err := p.TakeTrimmed(ctx, shard[0], 1000); err != nil {
			b.Fatal(err)
		}
		round()
		u0, c0 := scriptTime(b, rdb)
		b.StartTimer()
		if kept := settle(); kept != 100 {
			b.Fatalf("kept %d of 100 trimmed", kept)
		}
		b.StopTimer()
		u1, c1 := scriptTime(b, rdb)
		usec, calls = usec+u1-u0, calls+c1-c0
		jobs += len(ops)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(jobs), "ns/job")
	if jobs > 0 {
		b.ReportMetric(usec/float64(jobs), "script-us/job")
	}
}
