package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/rawjson"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// FuzzClaimKeepsTypeControls: whatever bytes a payload holds, a job of a
// paused type is parked, one of a type at its concurrency cap is held and
// one of a type out of rate-limit tokens is held for its token: the claim leases none
// of them, against a real redis-server. A payload that is JSON is also
// stored in the layout of before the header (payload first), as another
// program or an older version would have; such a body is either checked
// like the others or leased only with an error wrapping job.ErrCorrupt
// (the worker dead-letters it unrun), never leased as a job of no type.
func FuzzClaimKeepsTypeControls(f *testing.F) {
	for _, bp := range bypassPayloads {
		f.Add(bp.payload)
	}
	for _, s := range []string{``, `{}`, `null`, `{"t":"free"}`, `{"p":1,"t":"free"}`, `"\u0000"`, `[{"x":"\udfff\ud800"}]`,
		`{"a":"\\","t":"free"}`, "\xff\xfe", `{"x":1e999}`, strings.Repeat(`{"a":`, 1200) + `1` + strings.Repeat(`}`, 1200)} {
		f.Add([]byte(s))
	}
	rdb, ns := redistest.New(f)
	clk := clock.NewSimulated(epoch)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		f.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	ctx := context.Background()
	const q = "fz"
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	// One job of the capped type runs, and one of the limited type took
	// the only token of the hour: later ones of both must wait.
	must(b.SetConcurrency(ctx, q, "fz.capped", 1))
	must(b.SetRateLimit(ctx, q, "fz.limited", job.RateLimit{Count: 1, Per: time.Hour}))
	must(b.Pause(ctx, q, "fz.paused"))
	must(b.Enqueue(ctx, &job.Envelope{ID: "run-capped", Queue: q, Type: "fz.capped"}, &job.Envelope{ID: "run-limited", Queue: q, Type: "fz.limited"}))
	s := testkit.Shards(f, b, q)[0]
	p := protocol.For(b)
	w := protocol.Caller{ID: "fz", Lease: time.Hour}
	first, err := p.Claim(ctx, s, w, "0", 10, time.Hour)
	if err != nil || len(first.Jobs) != 2 {
		f.Fatalf("setup claim: %d jobs, %v", len(first.Jobs), err)
	}
	k := s.Keys()
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, payload []byte) {
		n := seq.Add(1)
		ids := map[string]string{} // id -> type
		var envs []*job.Envelope
		for _, typ := range []string{"fz.paused", "fz.capped", "fz.limited"} {
			id := fmt.Sprintf("%s-%d", typ, n)
			ids[id] = typ
			envs = append(envs, &job.Envelope{ID: id, Queue: q, Type: typ, Payload: payload})
		}
		if err := b.Enqueue(ctx, envs...); err != nil {
			if errors.Is(err, job.ErrInvalid) {
				return // refused whole (too large), nothing stored
			}
			t.Fatal(err)
		}
		old := ""
		if len(payload) > 0 && rawjson.IsCompact(payload) {
			old = fmt.Sprintf("old-%d", n)
			ids[old] = "fz.paused"
			pipe := rdb.Pipeline()
			pipe.HSet(ctx, k.Jobs, old, `{"p":`+string(payload)+`,"t":"fz.paused"}`)
			pipe.ZAdd(ctx, k.Scheduled, redis.Z{Score: float64(epoch.UnixMilli()), Member: old})
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		res, err := p.Claim(ctx, s, w, fmt.Sprint(n), 10, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Jobs {
			if c.ID != old || !errors.Is(c.Err, job.ErrCorrupt) {
				t.Fatalf("payload %q: job %s (%s) was leased past its type's controls (err %v)", payload, c.ID, ids[c.ID], c.Err)
			}
		}
		// Each waits where its control put it.
		pipe := rdb.Pipeline()
		parked := pipe.ZScore(ctx, k.Parked, fmt.Sprintf("fz.paused-%d", n))
		held := pipe.ZScore(ctx, k.Held+"fz.capped", fmt.Sprintf("fz.capped-%d", n))
		limited := pipe.ZScore(ctx, k.Held+"fz.limited", fmt.Sprintf("fz.limited-%d", n))
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if parked.Err() != nil || held.Err() != nil || limited.Err() != nil || limited.Val() != float64(epoch.UnixMilli()) {
			t.Fatalf("payload %q: parked %v, held %v, held for a token %v (ready %v); want each set aside by its control, its ready time kept", payload, parked.Err(), held.Err(), limited.Err(), limited.Val())
		}
		// Leave the queue as it was.
		all := make([]string, 0, len(ids))
		for id := range ids {
			all = append(all, id)
		}
		pipe = rdb.Pipeline()
		pipe.ZRem(ctx, k.Parked, toAny(all)...)
		pipe.ZRem(ctx, k.Held+"fz.capped", toAny(all)...)
		pipe.ZRem(ctx, k.Held+"fz.limited", toAny(all)...)
		pipe.ZRem(ctx, k.Scheduled, toAny(all)...)
		pipe.ZRem(ctx, k.Processing, toAny(all)...)
		pipe.HDel(ctx, k.Jobs, all...)
		pipe.HDel(ctx, k.Attempts, all...)
		pipe.HDel(ctx, k.Leases, all...)
		pipe.HDel(ctx, k.Running, all...)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
