package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// A progress report is fenced like an ack: the worker whose lease ran out
// and was claimed again cannot write over the new holder's progress.
func TestProgressIsFenced(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("p1", 0))
	first := tb.claim(t, 1).Jobs[0]
	p := protocol.For(tb.b)
	at, err := p.Progress(tb.ctx, first.Lease, job.Progress{Fraction: 0.5, Message: "mine"})
	if err != nil || !at.Equal(epoch) {
		t.Fatalf("progress of the holder: %v, %v", at, err)
	}
	tb.clock.Advance(11 * time.Second) // the lease ran out
	d := testkit.Drive(tb.b)
	reaped, err := d.Reap(tb.ctx, "q", 10)
	if err != nil || len(reaped.Jobs) != 1 {
		t.Fatalf("reap: %+v, %v", reaped, err)
	}
	if _, err := d.Settle(tb.ctx, protocol.Op{Kind: protocol.OpRelease, Lease: reaped.Jobs[0].Lease, Expired: true}); err != nil {
		t.Fatal(err)
	}
	second := tb.claim(t, 1)
	if len(second.Jobs) != 1 || second.Jobs[0].Token == first.Token {
		t.Fatalf("second claim %v", ids(second.Jobs))
	}
	if _, err := p.Progress(tb.ctx, first.Lease, job.Progress{Fraction: 0.9, Message: "stale"}); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("a stale worker's progress: %v, want ErrLeaseLost", err)
	}
	info, err := tb.b.Job(tb.ctx, "q", "p1")
	if err != nil || info.State != job.StateProcessing {
		t.Fatalf("%+v, %v", info, err)
	}
	if info.Progress != nil && info.Progress.Message == "stale" {
		t.Fatalf("the stale worker's progress was stored: %+v", info.Progress)
	}
}

// A retained record whose bytes are not what settle wrote reads back as a
// succeeded job with an error naming the record, not as a crash or a lie.
func TestCorruptRetainedRecord(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.rdb.Set(tb.ctx, testkit.Keys(t, tb.b, "q").Done+"x", "garbage", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := tb.b.Job(tb.ctx, "q", "x")
	if err != nil || info.State != job.StateSucceeded || !errors.Is(info.Err, job.ErrCorrupt) {
		t.Fatalf("%+v, %v; want succeeded with a corrupt-record error", info, err)
	}
}
