package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// Next jobs of the job's own shard are stored by the call that acks it and
// by no other: a stale worker's ack stores none, the holder's stores them
// with the ready time counted from the ack, and an id already pending keeps
// its job.
func TestChainInSlotIsAtomicWithTheAck(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	parent := env("p1", 0)
	tb.enqueue(t, parent, env("b", time.Hour))
	first := tb.claim(t, 1).Jobs[0]
	p := protocol.For(tb.b)
	next := []*job.Envelope{
		{Queue: "q", Type: "t.next", Payload: []byte(`{"step":2}`), Delay: 5 * time.Second},
		{ID: "b", Queue: "q", Type: "t.next", Payload: []byte(`{"step":3}`)},
	}
	here, err := p.Chain(tb.ctx, first.Lease, parent, next)
	if err != nil || len(here) != 2 {
		t.Fatalf("chain: %d in the shard, %v; want both", len(here), err)
	}
	derived := rules.ChainID("p1", parent.CreatedAt, 1)
	if here[0].ID != derived || here[1].ID != "b" {
		t.Fatalf("ids %q, %q; want %q, b", here[0].ID, here[1].ID, derived)
	}

	// The lease runs out and another worker takes the job: the first
	// worker's ack, next jobs and all, changes nothing.
	tb.clock.Advance(11 * time.Second)
	d := testkit.Drive(tb.b)
	reaped, err := d.Reap(tb.ctx, "q", 10)
	if err != nil || len(reaped.Jobs) != 1 {
		t.Fatalf("reap: %+v, %v", reaped, err)
	}
	if _, err := d.Settle(tb.ctx, protocol.Op{Kind: protocol.OpRelease, Lease: reaped.Jobs[0].Lease, Expired: true}); err != nil {
		t.Fatal(err)
	}
	second := tb.claim(t, 1).Jobs[0]
	res, _ := d.Settle(tb.ctx, protocol.Op{Kind: protocol.OpAck, Lease: first.Lease, Next: here})
	if !errors.Is(res[0].Err, broker.ErrLeaseLost) {
		t.Fatalf("stale ack: %v; want ErrLeaseLost", res[0].Err)
	}
	if _, err := tb.b.Job(tb.ctx, "q", derived); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("next job after a stale ack: %v, want ErrNotFound", err)
	}

	res, err = d.Settle(tb.ctx, protocol.Op{Kind: protocol.OpAck, Lease: second.Lease, Next: here})
	if err != nil || res[0].Err != nil {
		t.Fatalf("ack: %+v, %v", res, err)
	}
	if _, err := tb.b.Job(tb.ctx, "q", "p1"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("acked parent: %v, want ErrNotFound", err)
	}
	info, err := tb.b.Job(tb.ctx, "q", derived)
	if err != nil || info.State != job.StateScheduled || info.Envelope.Type != "t.next" {
		t.Fatalf("next job: %+v, %v; want it scheduled", info, err)
	}
	if want := info.Now.Add(5 * time.Second); !info.ReadyAt.Equal(want) {
		t.Fatalf("next job ready at %v, want %v (5s after the ack)", info.ReadyAt, want)
	}
	if got := string(info.Envelope.Payload); got != `{"step":2}` {
		t.Fatalf("next job payload %s", got)
	}
	kept, err := tb.b.Job(tb.ctx, "q", "b")
	if err != nil || string(kept.Envelope.Payload) != `{"n":1}` {
		t.Fatalf("the pending job b: %+v, %v; want it unchanged", kept, err)
	}
}

// Next jobs of another queue are enqueued by Chain itself, once: a second
// Chain for the same parent (its first success was never acked) finds the
// job pending, and one after the next job ended finds its id remembered.
func TestChainAcrossSlotsIsIdempotent(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	parent := env("p1", 0)
	tb.enqueue(t, parent)
	c := tb.claim(t, 1).Jobs[0]
	p := protocol.For(tb.b)
	next := []*job.Envelope{{Queue: "other", Type: "t.next", Payload: []byte(`{}`)}}
	for round := range 2 {
		here, err := p.Chain(tb.ctx, c.Lease, parent, next)
		if err != nil || len(here) != 0 {
			t.Fatalf("round %d: %d left for the ack, %v; want none", round, len(here), err)
		}
	}
	id := rules.ChainID("p1", parent.CreatedAt, 1)
	d := testkit.Drive(tb.b)
	got, err := d.Claim(tb.ctx, "other", 10, 10*time.Second)
	if err != nil || len(got.Jobs) != 1 || got.Jobs[0].ID != id {
		t.Fatalf("claimed %v, %v; want the one next job %s", ids(got.Jobs), err, id)
	}
	// Acked as a worker acks it: the envelope asks for its id to be
	// remembered.
	nextEnv := got.Jobs[0].Envelope
	if !nextEnv.Unique || nextEnv.UniqueFor != rules.ChainRemember {
		t.Fatalf("next job of another slot: unique %v for %v; want remembered for ChainRemember", nextEnv.Unique, nextEnv.UniqueFor)
	}
	if res, err := d.Settle(tb.ctx, protocol.Op{Kind: protocol.OpAck, Lease: got.Jobs[0].Lease, Remember: nextEnv.UniqueFor}); err != nil || res[0].Err != nil {
		t.Fatalf("ack of the next job: %+v, %v", res, err)
	}
	if _, err := p.Chain(tb.ctx, c.Lease, parent, next); err != nil {
		t.Fatalf("chain after the next job ended: %v", err)
	}
	if info, err := tb.b.Job(tb.ctx, "other", id); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("next job enqueued again after it ended: %+v, %v", info, err)
	}
	// A parent enqueued again under its id is another job: its next jobs
	// have other ids.
	if again := rules.ChainID("p1", parent.CreatedAt.Add(time.Millisecond), 1); again == id {
		t.Fatalf("two creations share the next job id %s", id)
	}
}

// A next job that could never be enqueued is refused with an error that
// names it, and nothing is enqueued.
func TestChainBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	parent := env("p1", 0)
	tb.enqueue(t, parent)
	c := tb.claim(t, 1).Jobs[0]
	p := protocol.For(tb.b)
	for name, next := range map[string][]*job.Envelope{
		"bad queue": {{Queue: "no such queue!", Type: "t"}},
		"bad type":  {{Queue: "other", Type: ""}},
		"nil":       {nil},
		"bad id":    {{ID: "a{b}", Queue: "q", Type: "t"}},
	} {
		if _, err := p.Chain(tb.ctx, c.Lease, parent, next); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n, err := testkit.OneStats(tb.b.Stats(tb.ctx, "other")); err == nil && n.Scheduled != 0 {
		t.Fatalf("queue other has %d jobs after refused chains", n.Scheduled)
	}
}
