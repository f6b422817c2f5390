package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// BenchmarkHeldKeys100k: a queue with 100,000 active keys, each with one
// job running under a default key cap of 1 and one held by it (200,000
// jobs). top20 reads the 20 keys holding the most (HeldKeys), stats the
// queue's Stats (whose HeldByKey sums every key's count). Once, it
// reports the Redis memory per active key of ns:{q}:keyheld (a ZSET, and
// a SET of the same members for comparison), of one key's held set and
// of ns:{q}:keyrun.
func BenchmarkHeldKeys100k(b *testing.B) {
	const keys = 100_000
	br := benchBroker(b)
	ctx := context.Background()
	rdb := br.Client()
	envs := make([]*job.Envelope, 0, 1000)
	for i := range 2 * keys {
		envs = append(envs, &job.Envelope{ID: "j" + strconv.Itoa(i), Queue: "bench", Type: "order.cancel", Payload: benchPayload, MaxRetries: 10,
			Key: "customer-" + strconv.Itoa(i%keys)})
		if len(envs) == cap(envs) {
			if err := br.Enqueue(ctx, envs...); err != nil {
				b.Fatal(err)
			}
			envs = envs[:0]
		}
	}
	if err := br.SetKeyConcurrency(ctx, "bench", "", 1); err != nil {
		b.Fatal(err)
	}
	// Claim until nothing is scheduled: a claim leases a key's first job
	// and holds its second.
	claimed := 0
	for {
		res, err := testkit.Drive(br).Claim(ctx, "bench", 1000, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		claimed += len(res.Jobs)
		if len(res.Jobs) == 0 {
			st, err := testkit.OneStats(br.Stats(ctx, "bench"))
			if err != nil {
				b.Fatal(err)
			}
			if st.Scheduled == 0 {
				break
			}
		}
	}
	if claimed != keys {
		b.Fatalf("claimed %d, want one of each of %d keys", claimed, keys)
	}
	hk, err := br.HeldKeys(ctx, "bench", 20)
	if err != nil || hk.Holding != keys || len(hk.Keys) != 20 || hk.Keys[0].Held != 1 || hk.Keys[0].Running != 1 {
		b.Fatalf("held keys %+v, %v", hk, err)
	}
	k := testkit.Shards(b, br, "bench")[0].Keys()
	usage := func(key string) float64 {
		n, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		return float64(n)
	}
	p := k.Held[:len(k.Held)-len("held:")]
	zsetB := usage(p+"keyheld") / keys
	runB := usage(p+"keyrun") / keys
	heldB := usage(k.Held + "#customer-7")
	set := p + "bench-set"
	for i := 0; i < keys; i += 1000 {
		members := make([]any, 0, 1000)
		for j := i; j < i+1000; j++ {
			members = append(members, "customer-"+strconv.Itoa(j))
		}
		if err := rdb.SAdd(ctx, set, members...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	setB := usage(set) / keys
	if err := rdb.Del(ctx, set).Err(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"top20", func() error {
			hk, err := br.HeldKeys(ctx, "bench", 20)
			if err == nil && len(hk.Keys) != 20 {
				err = fmt.Errorf("%d keys", len(hk.Keys))
			}
			return err
		}},
		{"stats", func() error {
			st, err := testkit.OneStats(br.Stats(ctx, "bench"))
			if err == nil && st.HeldByKey != keys {
				err = fmt.Errorf("held by key %d", st.HeldByKey)
			}
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.f(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(zsetB, "keyheld-zset-B/key")
			b.ReportMetric(setB, "as-set-B/key")
			b.ReportMetric(heldB, "held-set-B/key")
			b.ReportMetric(runB, "keyrun-B/key")
		})
	}
}
