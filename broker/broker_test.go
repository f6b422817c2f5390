package broker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

type testBundle struct {
	t     testing.TB
	ctx   context.Context
	b     *broker.Broker
	rdb   redis.UniversalClient
	ns    string
	clock *clock.Simulated
}

var epoch = time.UnixMilli(1_800_000_000_000)

// setup returns a broker on its own namespace whose scripts use a simulated
// clock.
func setup(t *testing.T, opts ...func(*broker.Options)) *testBundle {
	t.Helper()
	rdb, ns := redistest.New(t)
	clk := clock.NewSimulated(epoch)
	o := broker.Options{Namespace: ns}
	for _, f := range opts {
		f(&o)
	}
	b, err := broker.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	return &testBundle{t: t, ctx: context.Background(), b: b, rdb: rdb, ns: ns, clock: clk}
}

func (tb *testBundle) key(queue, name string) string { return testkit.Key(tb.t, tb.b, queue, name) }

// envs counts the envelopes env made: each gets a creation time of its own.
var envs atomic.Int64

func env(id string, delay time.Duration) *job.Envelope {
	return &job.Envelope{ID: id, Queue: "q", Type: "t", Payload: []byte(`{"n":1}`), MaxRetries: 3, Delay: delay,
		CreatedAt: epoch.Add(time.Duration(envs.Add(1)) * time.Millisecond)}
}

func (tb *testBundle) enqueue(t *testing.T, envs ...*job.Envelope) {
	t.Helper()
	if err := tb.b.Enqueue(tb.ctx, envs...); err != nil {
		t.Fatal(err)
	}
}

func (tb *testBundle) claim(t *testing.T, n int) protocol.ClaimResult {
	t.Helper()
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", n, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ids(cs []protocol.Claimed) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func TestEnqueueClaimAck(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	e := env("a", 2*time.Second)
	tb.enqueue(t, e, env("b", time.Second))
	if want := epoch.Add(2 * time.Second); !e.ReadyAt.Equal(want) {
		t.Fatalf("ReadyAt = %v, want %v", e.ReadyAt, want)
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(time.Second)) {
		t.Fatalf("claim before due: jobs %v next %v", ids(res.Jobs), res.Next)
	}
	tb.clock.Advance(2 * time.Second)
	res := tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "b,a" {
		t.Fatalf("claimed %q, want b,a in ready order", got)
	}
	c := res.Jobs[1]
	if c.Err != nil || c.Attempt != 1 || string(c.Envelope.Payload) != `{"n":1}` || c.Envelope.MaxRetries != 3 {
		t.Fatalf("claimed %+v", c)
	}
	if !res.Next.IsZero() {
		t.Fatalf("Next = %v, want zero for an empty queue", res.Next)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease, res.Jobs[1].Lease); err != nil {
		t.Fatal(err)
	}
	tb.noJobLeft(t, "q")
}

func TestEnqueueAt(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	at := epoch.Add(90 * time.Minute)
	e := env("a", 0)
	e.At = at
	tb.enqueue(t, e)
	score, err := tb.rdb.ZScore(tb.ctx, tb.key("q", "scheduled"), "a").Result()
	if err != nil || int64(score) != at.UnixMilli() {
		t.Fatalf("score %v, %v; want %d", score, err, at.UnixMilli())
	}

	// A time between two ms rounds up: the job is never due before it.
	e = env("b", 0)
	e.At = at.Add(300 * time.Microsecond)
	tb.enqueue(t, e)
	if want := at.Add(time.Millisecond); !e.ReadyAt.Equal(want) {
		t.Fatalf("ReadyAt %v for At %v, want %v", e.ReadyAt, e.At, want)
	}
	tb.clock.Advance(90 * time.Minute)
	if res := tb.claim(t, 5); len(res.Jobs) != 1 || res.Jobs[0].ID != "a" {
		t.Fatalf("claimed %v at %v, want only a", ids(res.Jobs), epoch.Add(90*time.Minute))
	}
	rs, err := tb.b.Reschedule(tb.ctx, "q", "b", at.Add(time.Minute+time.Nanosecond))
	if err != nil || !rs.Equal(at.Add(time.Minute+time.Millisecond)) {
		t.Fatalf("Reschedule to a sub-ms time gave %v, %v", rs, err)
	}
}

func TestEnqueueUsesServerClock(t *testing.T) {
	t.Parallel()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	e := env("a", time.Minute)
	if err := b.Enqueue(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	server, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The ready time is the enqueue's server time + 1m, rounded up to the
	// ms; the server's time read after it is no earlier.
	if d := e.ReadyAt.Sub(server.Add(time.Minute)); d > time.Millisecond || d < -time.Second {
		t.Fatalf("ReadyAt %v is not server time + 1m (%v)", e.ReadyAt, server.Add(time.Minute))
	}
}

func TestDuplicateIDLeavesFirstUnchanged(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("order-42", time.Minute))
	dup := env("order-42", time.Second)
	dup.Payload = []byte(`{"n":2}`)
	err := tb.b.Enqueue(tb.ctx, dup)
	if !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("err = %v, want ErrDuplicate", err)
	}
	score, _ := tb.rdb.ZScore(tb.ctx, tb.key("q", "scheduled"), "order-42").Result()
	body, _ := tb.rdb.HGet(tb.ctx, tb.key("q", "jobs"), "order-42").Result()
	if int64(score) != epoch.Add(time.Minute).UnixMilli() || !strings.Contains(body, `{"n":1}`) {
		t.Fatalf("first job changed: score %v body %s", score, body)
	}

	// In a batch, the duplicate fails alone.
	err = tb.b.Enqueue(tb.ctx, env("x", 0), env("order-42", 0), env("y", 0))
	var be *job.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], broker.ErrDuplicate) || be.Errs[2] != nil {
		t.Fatalf("batch err = %v", err)
	}
	if n, _ := tb.rdb.ZCard(tb.ctx, tb.key("q", "scheduled")).Result(); n != 3 {
		t.Fatalf("scheduled %d jobs, want 3", n)
	}
}

func TestEnqueueRejectsBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, func(o *broker.Options) { o.MaxPayloadBytes = 64 })
	long := strings.Repeat("x", naming.MaxIDLen+1)
	cases := []struct {
		name string
		mod  func(*job.Envelope)
		want string
	}{
		{"empty type", func(e *job.Envelope) { e.Type = "" }, "job type must not be empty"},
		{"long id", func(e *job.Envelope) { e.ID = long }, "id is 257 bytes long"},
		{"brace in id", func(e *job.Envelope) { e.ID = "a{b" }, `contains '{'`},
		{"brace in queue", func(e *job.Envelope) { e.Queue = "q}" }, `queue name "q}" contains '}'`},
		{"long queue", func(e *job.Envelope) { e.Queue = strings.Repeat("q", 65) }, "queue name is 65 bytes long"},
		{"negative delay", func(e *job.Envelope) { e.Delay = -time.Second }, "delay -1s is negative"},
		{"negative retries", func(e *job.Envelope) { e.MaxRetries = -1 }, `max retries -1 of job "a" is negative`},
		{"payload over cap", func(e *job.Envelope) { e.Payload = []byte(`"` + strings.Repeat("p", 70) + `"`) }, "payload and headers of job \"a\" are 72 bytes, the cap is 64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := env("a", 0)
			tc.mod(e)
			err := tb.b.Enqueue(tb.ctx, env("ok", 0), e)
			if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
	if keys := redistest.Keys(t, tb.rdb, tb.ns+":*"); len(keys) != 0 {
		t.Fatalf("bad input wrote keys %v", keys)
	}
	if err := tb.b.Enqueue(tb.ctx, env("a", 0)); err != nil {
		t.Fatal(err)
	}
}

func TestClaimLimitAndOrphans(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, id := range []string{"a", "b", "c"} {
		tb.enqueue(t, env(id, 0))
	}
	tb.rdb.HDel(tb.ctx, tb.key("q", "jobs"), "a") // an envelope lost by another program
	res := tb.claim(t, 1)
	if len(res.Jobs) != 0 || len(res.Orphans) != 1 || res.Orphans[0] != "a" {
		t.Fatalf("jobs %v orphans %v; want the orphan a reported and removed", ids(res.Jobs), res.Orphans)
	}
	if !res.Next.Equal(epoch) {
		t.Fatalf("Next = %v, want the due b", res.Next)
	}
	res = tb.claim(t, 1)
	if got := ids(res.Jobs); len(got) != 1 || got[0] != "b" {
		t.Fatalf("claimed %v, want [b]", got)
	}
}

func TestCorruptEnvelopeIsReported(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	tb.rdb.HSet(tb.ctx, tb.key("q", "jobs"), "a", "\x00\xffgarbage")
	res := tb.claim(t, 1)
	if len(res.Jobs) != 1 || !errors.Is(res.Jobs[0].Err, job.ErrCorrupt) || string(res.Jobs[0].Body) != "\x00\xffgarbage" {
		t.Fatalf("claimed %+v, want a corrupt envelope error with the raw body", res.Jobs)
	}
}

func TestFencing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	first := tb.claim(t, 1).Jobs[0]

	// The lease runs out; the reaper sees it and retries it with the token
	// it read.
	tb.clock.Advance(11 * time.Second)
	reaped, err := testkit.Drive(tb.b).Reap(tb.ctx, "q", 10)
	if err != nil || len(reaped.Jobs) != 1 || reaped.Jobs[0].Token != first.Token || reaped.Jobs[0].Attempt != 1 {
		t.Fatalf("reap = %+v, %v", reaped, err)
	}
	if _, err := testkit.Drive(tb.b).RetryExpired(tb.ctx, reaped.Jobs[0].Lease, 0, reaped.Jobs[0].Envelope); err != nil {
		t.Fatal(err)
	}
	second := tb.claim(t, 1).Jobs[0]
	if second.Token <= first.Token || second.Attempt != 2 {
		t.Fatalf("second claim token %d attempt %d", second.Token, second.Attempt)
	}

	// The first worker comes back: every state change is refused.
	if err := testkit.Drive(tb.b).Ack(tb.ctx, first.Lease); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("stale ack: %v", err)
	}
	if err := testkit.Drive(tb.b).Extend(tb.ctx, time.Minute, first.Lease); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("stale extend: %v", err)
	}
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, first.Lease, 0, first.Envelope); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("stale retry: %v", err)
	}
	if _, err := testkit.Drive(tb.b).Kill(tb.ctx, first.Lease, &job.DeadRecord{Error: "x"}); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("stale kill: %v", err)
	}
	if err := testkit.Drive(tb.b).Release(tb.ctx, first.Lease); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("stale release: %v", err)
	}
	if n, _ := tb.rdb.ZCard(tb.ctx, tb.key("q", "processing")).Result(); n != 1 {
		t.Fatalf("processing has %d jobs, want the second claim's 1", n)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, second.Lease); err != nil {
		t.Fatalf("live ack: %v", err)
	}
}

func TestReaperDoesNotTakeAnExtendedLease(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	c := tb.claim(t, 1).Jobs[0]
	tb.clock.Advance(11 * time.Second)
	reaped, _ := testkit.Drive(tb.b).Reap(tb.ctx, "q", 10)
	// The worker's heartbeat lands between the reaper's read and its retry.
	if err := testkit.Drive(tb.b).Extend(tb.ctx, 10*time.Second, c.Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Drive(tb.b).RetryExpired(tb.ctx, reaped.Jobs[0].Lease, 0, reaped.Jobs[0].Envelope); !errors.Is(err, protocol.ErrLeaseLive) {
		t.Fatalf("retry of a live lease: %v", err)
	}
	if _, err := testkit.Drive(tb.b).KillExpired(tb.ctx, reaped.Jobs[0].Lease, &job.DeadRecord{}); !errors.Is(err, protocol.ErrLeaseLive) {
		t.Fatalf("kill of a live lease: %v", err)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, c.Lease); err != nil {
		t.Fatalf("the worker still holds the job: %v", err)
	}
}

func TestReleaseKeepsAttempts(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	c := tb.claim(t, 1).Jobs[0]
	if err := testkit.Drive(tb.b).Release(tb.ctx, c.Lease); err != nil {
		t.Fatal(err)
	}
	again := tb.claim(t, 1).Jobs
	if len(again) != 1 || again[0].Attempt != 1 || again[0].Token == c.Token {
		t.Fatalf("after release: %+v", again)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, c.Lease); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("ack with the released token: %v", err)
	}
}

func TestRetrySchedulesAfterDelay(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	c := tb.claim(t, 1).Jobs[0]
	e := *c.Envelope
	e.LastError = "boom"
	ready, err := testkit.Drive(tb.b).Retry(tb.ctx, c.Lease, 5*time.Second, &e)
	if err != nil || !ready.Equal(epoch.Add(5*time.Second)) {
		t.Fatalf("retry = %v, %v", ready, err)
	}
	if res := tb.claim(t, 1); len(res.Jobs) != 0 {
		t.Fatal("retried job claimed before its delay")
	}
	tb.clock.Advance(5 * time.Second)
	res := tb.claim(t, 1)
	if len(res.Jobs) != 1 || res.Jobs[0].Attempt != 2 || res.Jobs[0].Envelope.LastError != "boom" {
		t.Fatalf("after delay: %+v", res.Jobs)
	}
}

func TestCancelAndReschedule(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", time.Minute), env("b", 0), env("c", time.Hour))
	if _, err := tb.b.Cancel(tb.ctx, "q", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "a"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("second cancel: %v", err)
	}
	if ok, _ := tb.rdb.HExists(tb.ctx, tb.key("q", "jobs"), "a").Result(); ok {
		t.Fatal("cancelled job's envelope is still stored")
	}
	tb.claim(t, 1) // b is now in progress
	if c, err := tb.b.Cancel(tb.ctx, "q", "b"); err != nil || !c.Running {
		t.Fatalf("cancel in progress: %+v, %v; want it asked to stop", c, err)
	}
	if _, err := tb.b.Reschedule(tb.ctx, "q", "b", epoch); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("reschedule in progress: %v", err)
	}
	at, err := tb.b.Reschedule(tb.ctx, "q", "c", epoch.Add(time.Second))
	if err != nil || !at.Equal(epoch.Add(time.Second)) {
		t.Fatalf("reschedule = %v, %v", at, err)
	}
	if _, err := tb.b.Reschedule(tb.ctx, "q", "zz", epoch); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("reschedule unknown: %v", err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", ""); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("cancel with empty id: %v", err)
	}
	tb.clock.Advance(time.Second)
	if res := tb.claim(t, 5); len(res.Jobs) != 1 || res.Jobs[0].ID != "c" {
		t.Fatalf("claimed %v, want the rescheduled c", ids(res.Jobs))
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", 0), env("c", time.Minute))
	tb.clock.Advance(3 * time.Second)
	c := tb.claim(t, 1).Jobs[0]
	if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Error: "x"}); err != nil {
		t.Fatal(err)
	}
	tb.claim(t, 0)
	s, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Scheduled != 2 || s.Due != 1 || s.Processing != 0 || s.Dead != 1 ||
		s.Now.Sub(s.OldestDue) != 3*time.Second || !s.NextReady.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("stats %+v", s)
	}
	qs, err := protocol.Admin(tb.b).Queues(tb.ctx)
	if err != nil || len(qs) != 1 || qs[0] != "q" {
		t.Fatalf("queues %v, %v", qs, err)
	}
}

func TestWakeupOnEarlierJob(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	notices, stop := testkit.Drive(tb.b).Wakeups(tb.ctx, []string{"q"})
	defer stop()
	// Give the subscription a moment to be in place before publishing.
	redistest.WaitFor(t, 5*time.Second, "subscription", func() bool {
		n, _ := tb.rdb.PubSubNumSub(tb.ctx, tb.key("q", "wake")).Result()
		return n[tb.key("q", "wake")] == 1
	})
	tb.enqueue(t, env("later", time.Hour))
	expectNotice(t, notices, true)
	tb.enqueue(t, env("even-later", 2*time.Hour)) // not the earliest
	expectNotice(t, notices, false)
	tb.enqueue(t, env("sooner", time.Minute))
	expectNotice(t, notices, true)
}

func expectNotice(t *testing.T, notices <-chan string, want bool) {
	t.Helper()
	select {
	case q := <-notices:
		if !want || q != "q" {
			t.Fatalf("unexpected notice %q", q)
		}
	case <-time.After(200 * time.Millisecond):
		if want {
			t.Fatal("no wake-up notice")
		}
	}
}
