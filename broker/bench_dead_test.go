package broker_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// BenchmarkSettleKill100 is the settle path of dead jobs: one Settle call
// that dead-letters 100 claimed jobs ("-1": one job, as a worker settles
// when deaths are spread out). "below-cap" never reaches the dead-letter
// cap; "at-cap" runs with the store full (DeadCap 1,000), so that each kill
// trims the oldest record. Only the Settle call is timed;
// script-us/job is the server's own script time per dead job
// (INFO commandstats).
func BenchmarkSettleKill100(b *testing.B) {
	for _, c := range []struct {
		name    string
		cap, in int
	}{{"below-cap", -1, 100}, {"at-cap", 1000, 100}, {"below-cap-1", -1, 1}, {"at-cap-1", 1000, 1}} {
		b.Run(c.name, func(b *testing.B) {
			rdb, ns := redistest.New(b)
			br, err := broker.New(rdb, broker.Options{Namespace: ns, DeadCap: c.cap})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			envs := make([]*job.Envelope, c.in)
			ops := make([]protocol.Op, 0, c.in)
			n := 0
			round := func() {
				for j := range envs {
					envs[j] = benchEnv(n, 0)
					n++
				}
				if err := br.Enqueue(ctx, envs...); err != nil {
					b.Fatal(err)
				}
				res, err := testkit.Drive(br).Claim(ctx, "bench", c.in, time.Minute)
				if err != nil || len(res.Jobs) != c.in {
					b.Fatalf("claimed %d: %v", len(res.Jobs), err)
				}
				ops = ops[:0]
				for _, j := range res.Jobs {
					ops = append(ops, protocol.Op{Kind: protocol.OpKill, Lease: j.Lease,
						Death: protocol.Death{Type: j.Envelope.Type, Body: j.Body, Error: "permanent: card declined", Attempts: 1}})
				}
			}
			if c.cap > 0 {
				// Fill the store to its cap first.
				for range c.cap / c.in {
					round()
					if _, err := testkit.Drive(br).Settle(ctx, ops...); err != nil {
						b.Fatal(err)
					}
				}
			}
			var usec, calls, cmds float64
			jobs := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				round()
				u0, c0 := scriptTime(b, rdb)
				k0 := commandsRun(b, rdb)
				b.StartTimer()
				if _, err := testkit.Drive(br).Settle(ctx, ops...); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				u1, c1 := scriptTime(b, rdb)
				cmds += commandsRun(b, rdb) - k0
				usec, calls = usec+u1-u0, calls+c1-c0
				jobs += len(ops)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(jobs), "ns/job")
			if jobs > 0 {
				b.ReportMetric(usec/float64(jobs), "script-us/job")
				b.ReportMetric(cmds/float64(jobs), "cmds/job")
			}
		})
	}
}

// commandsRun is how many commands the server ran, those the scripts call
// included, less the scripts' own calls and the benchmark's INFO: a count
// that, unlike time, a busy machine does not change.
func commandsRun(b *testing.B, rdb redis.UniversalClient) float64 {
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "cmdstat_") || k == "cmdstat_evalsha" || k == "cmdstat_eval" || k == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		f, _ := strconv.ParseFloat(calls, 64)
		n += f
	}
	return n
}
