package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// The scripts send many jobs per command; these tests pin what a batch does
// at the edges: the same id twice in one call, batches larger than one
// command chunk, and one wake-up notice per call.

func TestSameIDTwiceInOneEnqueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	first, second := env("twin", time.Minute), env("twin", 0)
	second.Payload = []byte(`{"n":2}`)
	err := tb.b.Enqueue(tb.ctx, first, second, env("other", 0))
	var be *job.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], broker.ErrDuplicate) || be.Errs[2] != nil {
		t.Fatalf("err = %v, want only the second twin to fail with ErrDuplicate", err)
	}
	body, _ := tb.rdb.HGet(tb.ctx, tb.key("q", "jobs"), "twin").Result()
	score, _ := tb.rdb.ZScore(tb.ctx, tb.key("q", "scheduled"), "twin").Result()
	if want := `{"t":"t","p":{"n":1}`; len(body) < len(want) || body[:len(want)] != want || int64(score) != epoch.Add(time.Minute).UnixMilli() {
		t.Fatalf("stored twin is not the first: %s at %v", body, score)
	}
	if n, _ := tb.rdb.ZCard(tb.ctx, tb.key("q", "scheduled")).Result(); n != 2 {
		t.Fatalf("scheduled %d jobs, want 2", n)
	}
}

func TestLargeBatchesEnqueueClaimAndAck(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const n = 2500 // more than one enqueue call and several command chunks
	envs := make([]*job.Envelope, n)
	for i := range envs {
		envs[i] = env(fmt.Sprintf("j%04d", i), time.Duration(i)*time.Millisecond)
	}
	tb.enqueue(t, envs...)
	tb.clock.Advance(time.Hour)
	res := tb.claim(t, n+10)
	if len(res.Jobs) != n || len(res.Orphans) != 0 || !res.Next.IsZero() {
		t.Fatalf("claimed %d (orphans %v, next %v), want %d", len(res.Jobs), res.Orphans, res.Next, n)
	}
	leases := make([]protocol.Lease, n)
	for i, c := range res.Jobs {
		if want := fmt.Sprintf("j%04d", i); c.ID != want || c.Attempt != 1 || c.Err != nil {
			t.Fatalf("job %d: id %s attempt %d err %v, want %s in ready order, attempt 1", i, c.ID, c.Attempt, c.Err, want)
		}
		if i > 0 && c.Token != res.Jobs[i-1].Token+1 {
			t.Fatalf("tokens not consecutive: %d after %d", c.Token, res.Jobs[i-1].Token)
		}
		if !c.ReadyAt.Equal(epoch.Add(time.Duration(i) * time.Millisecond)) {
			t.Fatalf("job %d ready at %v", i, c.ReadyAt)
		}
		leases[i] = c.Lease
	}
	if got := len(tb.jobFields(t, tb.key("q", "leases"))); got != n {
		t.Fatalf("%d leases stored, want %d", got, n)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, leases...); err != nil {
		t.Fatal(err)
	}
	tb.noJobLeft(t, "q")
}

func TestAttemptsCountAcrossClaimsOfABatch(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", 0))
	res := tb.claim(t, 2)
	// a goes back (shutdown release keeps its attempt count), b is retried
	// (the attempt is spent).
	if err := testkit.Drive(tb.b).Release(tb.ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, res.Jobs[1].Lease, 0, res.Jobs[1].Envelope); err != nil {
		t.Fatal(err)
	}
	again := tb.claim(t, 2)
	got := map[string]int{}
	for _, c := range again.Jobs {
		got[c.ID] = c.Attempt
		if c.Token <= res.Jobs[1].Token {
			t.Errorf("token %d of %s not above the earlier %d", c.Token, c.ID, res.Jobs[1].Token)
		}
	}
	if got["a"] != 1 || got["b"] != 2 {
		t.Fatalf("attempts %v, want a=1 (released) b=2 (retried)", got)
	}
}

func TestSameLeaseTwiceInOneAck(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", 0))
	res := tb.claim(t, 2)
	a, b := res.Jobs[0].Lease, res.Jobs[1].Lease
	stale := a
	stale.Token++
	err := testkit.Drive(tb.b).Ack(tb.ctx, a, a, stale, b)
	var be *job.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], broker.ErrLeaseLost) ||
		!errors.Is(be.Errs[2], broker.ErrLeaseLost) || be.Errs[3] != nil {
		t.Fatalf("err = %v, want [nil, lease lost, lease lost, nil]", err)
	}
}

func TestOneWakeupPerEnqueueCall(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	channel := tb.key("q", "wake")
	ps := tb.rdb.Subscribe(tb.ctx, channel)
	defer ps.Close()
	if _, err := ps.Receive(tb.ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "subscription", func() bool {
		n, _ := tb.rdb.PubSubNumSub(tb.ctx, channel).Result()
		return n[channel] == 1
	})
	count := func() int {
		n := 0
		for {
			select {
			case <-ps.Channel():
				n++
			case <-time.After(200 * time.Millisecond):
				return n
			}
		}
	}
	// Each job of the batch would be the earliest of the set in turn.
	tb.enqueue(t, env("a", 4*time.Minute), env("b", 3*time.Minute), env("c", 2*time.Minute))
	if n := count(); n != 1 {
		t.Fatalf("%d notices for a batch into an empty queue, want 1", n)
	}
	tb.enqueue(t, env("d", time.Hour), env("e", 2*time.Hour))
	if n := count(); n != 0 {
		t.Fatalf("%d notices for a batch of later jobs, want 0", n)
	}
	tb.enqueue(t, env("f", time.Hour), env("g", time.Minute))
	if n := count(); n != 1 {
		t.Fatalf("%d notices for a batch with one earlier job, want 1", n)
	}
}
