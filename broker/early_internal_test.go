package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// No job starts early, measured on the server's µs clock: 1,000 jobs at
// delays that are not whole ms (job.In), then retried after such delays
// (retry delays and retry.After take the same path), then rescheduled after
// such delays (RescheduleAfter). Each is claimed, by the claim's own server
// time, no sooner than its delay after the server time of the script that
// set it. Ten jobs at a time are set and then claimed by a spinning loop, so
// that every claim comes as early as the broker allows.
func TestNoJobIsClaimedEarlyOnTheServersClock(t *testing.T) {
	t.Parallel()
	rdb, ns := redistest.New(t)
	b, err := New(rdb, Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const jobs, group = 1000, 10
	delay := func(i int) time.Duration {
		// 1.001 ms to 2.9 ms, hardly ever whole.
		return time.Millisecond + time.Duration(1+(i*137)%1900)*time.Microsecond
	}
	q, err := b.route.Place(ctx, "early")
	if err != nil {
		t.Fatal(err)
	}
	s := q.Shards()[0]
	k := s.Keys()
	w := workerSide{b}
	caller := protocol.Caller{ID: "w", Lease: time.Minute}
	calls := 0
	id := func() string { calls++; return fmt.Sprint(calls) }
	// claimAll claims the jobs of ids as soon as each is due, checking
	// that none is claimed before wait[id] has passed since set[id].
	claimAll := func(phase string, ids []string, set map[string]time.Time, wait map[string]time.Duration) []protocol.Claimed {
		var claimed []protocol.Claimed
		deadline := time.Now().Add(10 * time.Second)
		for len(claimed) < len(ids) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: claimed %d of %d in 10s", phase, len(claimed), len(ids))
			}
			res, err := w.Claim(ctx, s, caller, id(), group, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range res.Jobs {
				if waited := res.Now.Sub(set[c.ID]); waited < wait[c.ID] {
					t.Errorf("%s: job %s claimed %s after the server time that set it, before its delay %s", phase, c.ID, waited, wait[c.ID])
				}
			}
			claimed = append(claimed, res.Jobs...)
		}
		return claimed
	}
	for g := range jobs / group {
		ids := make([]string, group)
		set := map[string]time.Time{}
		wait := map[string]time.Duration{}
		for j := range group {
			i := g*group + j
			ids[j] = fmt.Sprintf("j%04d", i)
			env := &job.Envelope{ID: ids[j], Queue: "early", Type: "t", Payload: []byte(`{}`), Delay: delay(i)}
			body, err := b.prepare(env, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			res, err := b.run(ctx, enqueueScript, []string{k.Scheduled, k.Jobs, k.Unique, k.Calls}, k.Wake, b.windowArg(), "", ids[j], body, 0, durUS(env.Delay), "", callID())
			if err != nil {
				t.Fatal(err)
			}
			set[ids[j]], wait[ids[j]] = fromUS(res.([]any)[0].(int64)), env.Delay
		}
		claimed := claimAll("enqueue", ids, set, wait)

		// Retried after odd delays; settle returns its server time.
		ops := make([]protocol.Op, len(claimed))
		for j, c := range claimed {
			wait[c.ID] = delay(g*group + j + 7)
			ops[j] = protocol.Op{Kind: protocol.OpRetry, Lease: c.Lease, Delay: wait[c.ID], Env: c.Envelope}
		}
		res, err := b.runFrame(ctx, settleScript, settleArgs(t, b, q, s, caller, id(), ops))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claimed {
			set[c.ID] = fromUS(res.([]any)[0].(int64))
		}
		claimed = claimAll("retry", ids, set, wait)

		// Back to the schedule for an hour, then rescheduled after odd
		// delays.
		ops = make([]protocol.Op, len(claimed))
		for j, c := range claimed {
			ops[j] = protocol.Op{Kind: protocol.OpRetry, Lease: c.Lease, Delay: time.Hour, Env: c.Envelope}
		}
		if _, err := b.runFrame(ctx, settleScript, settleArgs(t, b, q, s, caller, id(), ops)); err != nil {
			t.Fatal(err)
		}
		for j, c := range claimed {
			wait[c.ID] = delay(g*group + j + 13)
			res, err := b.run(ctx, rescheduleScript, []string{k.Scheduled, k.Processing, k.Parked, k.Held, k.Jobs, k.Calls}, c.ID, 0, durUS(wait[c.ID]), k.Wake, callID(), b.windowArg())
			if err != nil {
				t.Fatal(err)
			}
			set[c.ID] = fromUS(res.([]any)[0].(int64))
		}
		claimed = claimAll("reschedule", ids, set, wait)
		if err := testAck(ctx, b, s, caller, id(), claimed); err != nil {
			t.Fatal(err)
		}
	}
}

// settleArgs is the command Settle sends for ops, for a test that reads
// the script's whole reply (its server time).
func settleArgs(t *testing.T, b *Broker, q keyspace.Queue, s keyspace.Shard, c protocol.Caller, id string, ops []protocol.Op) []any {
	t.Helper()
	args, err := b.settleArgs(q, s, c, protocol.LaneSettle, id, ops)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

func testAck(ctx context.Context, b *Broker, s keyspace.Shard, c protocol.Caller, id string, claimed []protocol.Claimed) error {
	ops := make([]protocol.Op, len(claimed))
	for i, cl := range claimed {
		ops[i] = protocol.Op{Kind: protocol.OpAck, Lease: cl.Lease}
	}
	res, err := workerSide{b}.Settle(ctx, s, c, protocol.LaneSettle, id, ops)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
