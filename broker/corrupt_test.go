package broker_test

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// Garbage written into a queue's bookkeeping by another program must never
// make a script fail half-way (Redis keeps the writes a failed script made
// before the error), stall claims or reaps, or lose a job: the job it hits is
// reported corrupt and dead-lettered by the worker, or handled as a lost
// lease, and every other job goes on.

// TestCorruptAttemptsCounterAtClaim: a non-integer attempts counter makes its
// job come back from Claim with an error wrapping job.ErrCorrupt, without
// failing the claim of the others.
func TestCorruptAttemptsCounterAtClaim(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", time.Millisecond), env("c", 2*time.Millisecond))
	tb.rdb.HSet(tb.ctx, tb.key("q", "attempts"), "b", "not a number")
	tb.clock.Advance(time.Second)
	res := tb.claim(t, 10)
	if len(res.Jobs) != 3 {
		t.Fatalf("claimed %v, want a, b, c", ids(res.Jobs))
	}
	for _, c := range res.Jobs {
		switch {
		case c.ID == "b" && !errors.Is(c.Err, job.ErrCorrupt):
			t.Fatalf("b claimed with error %v, want ErrCorrupt", c.Err)
		case c.ID != "b" && (c.Err != nil || c.Attempt != 1):
			t.Fatalf("%s claimed with error %v attempt %d", c.ID, c.Err, c.Attempt)
		}
	}
	b := res.Jobs[1]
	if _, err := testkit.Drive(tb.b).Kill(tb.ctx, b.Lease, &job.DeadRecord{Body: b.Body, Error: b.Err.Error(), Attempts: b.Attempt}); err != nil {
		t.Fatalf("dead-lettering b: %v", err)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease, res.Jobs[2].Lease); err != nil {
		t.Fatal(err)
	}
	tb.onlyDeadLeft(t, "b")
}

// TestCorruptAttemptsCounterAtReap: garbage written while the job is leased
// is reported by Reap, and the other expired leases are still reaped.
func TestCorruptAttemptsCounterAtReap(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", time.Millisecond))
	tb.clock.Advance(time.Second)
	tb.claim(t, 10)
	tb.rdb.HSet(tb.ctx, tb.key("q", "attempts"), "a", "1.5")
	tb.clock.Advance(time.Minute)
	res, err := testkit.Drive(tb.b).Reap(tb.ctx, "q", 10)
	if err != nil || len(res.Jobs) != 2 {
		t.Fatalf("Reap = %+v, %v; want a and b", res, err)
	}
	for _, c := range res.Jobs {
		if c.ID == "a" {
			if !errors.Is(c.Err, job.ErrCorrupt) {
				t.Fatalf("a reaped with error %v, want ErrCorrupt", c.Err)
			}
			if _, err := testkit.Drive(tb.b).KillExpired(tb.ctx, c.Lease, &job.DeadRecord{Body: c.Body, Error: c.Err.Error()}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if c.Err != nil {
			t.Fatalf("b reaped with error %v", c.Err)
		}
		if _, err := testkit.Drive(tb.b).RetryExpired(tb.ctx, c.Lease, 0, c.Envelope); err != nil {
			t.Fatal(err)
		}
	}
	again := tb.claim(t, 10).Jobs
	if len(again) != 1 || again[0].ID != "b" || again[0].Attempt != 2 {
		t.Fatalf("after reap claimed %+v, want b on attempt 2", again)
	}
}

// TestCorruptLeaseIsALostLease: a garbled fencing token fences its holder out
// (as a lost lease) and the job is reaped and retried when the lease runs
// out, without stalling the reaper.
func TestCorruptLeaseIsALostLease(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", time.Millisecond))
	tb.clock.Advance(time.Second)
	held := tb.claim(t, 10).Jobs
	tb.rdb.HSet(tb.ctx, tb.key("q", "leases"), "a", "\xffgarbage")
	if err := testkit.Drive(tb.b).Ack(tb.ctx, held[0].Lease); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("ack of a garbled lease = %v, want ErrLeaseLost", err)
	}
	tb.clock.Advance(time.Minute)
	res, err := testkit.Drive(tb.b).Reap(tb.ctx, "q", 10)
	if err != nil || len(res.Jobs) != 2 {
		t.Fatalf("Reap = %+v, %v; want a and b", res, err)
	}
	for _, c := range res.Jobs {
		if c.Err != nil {
			t.Fatalf("%s reaped with error %v", c.ID, c.Err)
		}
		if _, err := testkit.Drive(tb.b).RetryExpired(tb.ctx, c.Lease, 0, c.Envelope); err != nil {
			t.Fatalf("retry of %s: %v", c.ID, err)
		}
	}
	if again := tb.claim(t, 10).Jobs; len(again) != 2 || again[0].Attempt != 2 {
		t.Fatalf("after reap claimed %+v, want a and b on attempt 2", again)
	}
}

// TestCorruptSequenceCounter: a garbled fencing counter is restarted above
// every token handed out so far; no job is taken out of the schedule and
// left behind.
func TestCorruptSequenceCounter(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", 0))
	first := tb.claim(t, 1).Jobs[0]
	tb.rdb.Set(tb.ctx, tb.key("q", "seq"), "garbage", 0)
	res := tb.claim(t, 1)
	if len(res.Jobs) != 1 || res.Jobs[0].Token <= first.Token {
		t.Fatalf("claim after a garbled counter = %+v, want b with a token above %d", res.Jobs, first.Token)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, first.Lease, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	tb.onlyDeadLeft(t)
}

// TestInfiniteScores: scores of ±inf (ZADD accepts them) neither break the
// scripts nor make a worker spin: -inf is due now, +inf is never due and not
// reported as the next ready time.
func TestInfiniteScores(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("past", time.Hour), env("never", time.Hour))
	tb.rdb.ZAdd(tb.ctx, tb.key("q", "scheduled"),
		redis.Z{Score: math.Inf(-1), Member: "past"}, redis.Z{Score: math.Inf(1), Member: "never"})
	tb.enqueue(t, env("later", time.Hour)) // enqueue still works with -inf first
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Due != 1 || !st.OldestDue.Equal(epoch) || !st.Now.Equal(epoch) {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	res := tb.claim(t, 10)
	if len(res.Jobs) != 1 || res.Jobs[0].ID != "past" || !res.Jobs[0].ReadyAt.Equal(epoch) {
		t.Fatalf("claimed %+v, want past, ready now", res.Jobs)
	}
	if !res.Next.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("Next = %v, want later's ready time", res.Next)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "later"); err != nil {
		t.Fatal(err)
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 0 || !res.Next.IsZero() {
		t.Fatalf("with only +inf left: claimed %v, Next %v; want nothing and a zero Next", ids(res.Jobs), res.Next)
	}
}

// onlyDeadLeft fails the test unless the queue holds nothing but the dead
// records of ids (and the fencing counter, which stays by design).
func (tb *testBundle) onlyDeadLeft(t *testing.T, ids ...string) {
	t.Helper()
	tb.noJobLeft(t, "q")
	dead, _ := tb.rdb.HKeys(tb.ctx, tb.key("q", "dead")).Result()
	if len(dead) != len(ids) {
		t.Errorf("dead records %v, want %v", dead, ids)
	}
}

// noJobLeft fails the test if queue's scheduled, processing and jobs keys
// exist or its attempts and leases hashes hold any field but
// keyspace.EncodingField.
func (tb *testBundle) noJobLeft(t *testing.T, queue string) {
	t.Helper()
	for _, k := range []string{"scheduled", "processing", "jobs"} {
		if n, _ := tb.rdb.Exists(tb.ctx, tb.key(queue, k)).Result(); n != 0 {
			t.Errorf("key %s left behind", k)
		}
	}
	for _, k := range []string{"attempts", "leases"} {
		if ids := tb.jobFields(t, tb.key(queue, k)); len(ids) > 0 {
			t.Errorf("%s left behind: %v", k, ids)
		}
	}
}

// jobFields returns the fields of the hash key but keyspace.EncodingField:
// the job ids of an attempts or leases hash.
func (tb *testBundle) jobFields(t *testing.T, key string) []string {
	t.Helper()
	fields, err := tb.rdb.HKeys(tb.ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(fields, func(f string) bool { return f == keyspace.EncodingField })
}
