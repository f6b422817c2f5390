package broker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// killAll dead-letters every claimed job in one Settle call of caller c and
// returns the call's trims (nil when it trimmed nothing).
func (tb *testBundle) killAll(t *testing.T, c protocol.Caller, claimed []protocol.Claimed) *protocol.Trims {
	t.Helper()
	ops := make([]protocol.Op, len(claimed))
	for i, j := range claimed {
		ops[i] = protocol.Op{Kind: protocol.OpKill, Lease: j.Lease, Death: protocol.Death{Type: "t", Body: j.Body, Error: "boom " + j.ID, Attempts: 1}}
	}
	res, err := protocol.For(tb.b).Settle(tb.ctx, claimed[0].Shard, c, protocol.LaneSettle, job.NewID(), ops)
	if err != nil {
		t.Fatal(err)
	}
	var trims *protocol.Trims
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Trims != nil {
			if trims != nil || ops[i].Kind != protocol.OpKill {
				t.Fatalf("trims on more than one result, or not on a kill: %+v", res)
			}
			trims = r.Trims
		}
	}
	return trims
}

// TestTrimsCountedKeptAndWarned: the kills of a full store count what they
// trim, keep it for the hook up to the caller's bound (the rest counted
// unarchived), and claim the queue's warning once per TrimWarnEvery of the
// server's clock; TakeTrimmed hands each kept record once, oldest first;
// an operator's trim by age counts as age; Forget keeps a queue whose kept
// records wait.
func TestTrimsCountedKeptAndWarned(t *testing.T) {
	t.Parallel()
	tb := setup(t, func(o *broker.Options) { o.DeadCap = 2 })
	c := protocol.Caller{ID: "w", Lease: time.Minute, KeepTrimmed: 2}
	batch := func(from, n int) []protocol.Claimed {
		for i := range n {
			tb.enqueue(t, env(fmt.Sprintf("j%02d", from+i), 0))
		}
		res := tb.claim(t, n)
		if len(res.Jobs) != n {
			t.Fatalf("claimed %d, want %d", len(res.Jobs), n)
		}
		return res.Jobs
	}
	if tr := tb.killAll(t, c, batch(0, 2)); tr != nil {
		t.Fatalf("trims below the cap: %+v", tr)
	}
	tb.clock.Advance(time.Millisecond)
	tr := tb.killAll(t, c, batch(2, 3))
	if tr == nil || tr.ByCap != 3 || tr.ByAge != 0 || tr.Kept != 2 || tr.Unarchived != 1 || !tr.Warn || tr.Cap != 2 {
		t.Fatalf("first trims %+v: want 3 by the cap, 2 kept, 1 unarchived, the warning, cap 2", tr)
	}
	tb.clock.Advance(broker.TrimWarnEvery - time.Millisecond)
	if tr := tb.killAll(t, c, batch(5, 1)); tr == nil || tr.ByCap != 1 || tr.Warn || tr.Kept != 0 || tr.Unarchived != 1 {
		t.Fatalf("trims within a minute of the warning: %+v; want 1 by the cap, unarchived (the buffer is full), no warning", tr)
	}
	tb.clock.Advance(time.Millisecond)
	if tr := tb.killAll(t, protocol.Caller{ID: "w2", Lease: time.Minute}, batch(6, 1)); tr == nil || tr.ByCap != 1 || !tr.Warn || tr.Kept != 0 || tr.Unarchived != 0 {
		t.Fatalf("trims a minute after the warning by a worker without the hook: %+v; want 1 by the cap, the warning, nothing kept or unarchived", tr)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Dead != 2 || st.DeadTrimmedCap != 5 || st.DeadTrimmedAge != 0 || st.DeadTrimmedUnarchived != 2 {
		t.Fatalf("stats %+v (%v): want 2 dead, 5 trimmed by the cap, 2 unarchived", st, err)
	}

	// The kept records: the two oldest of the first trim, each once.
	s := testkit.Shards(t, tb.b, "q")[0]
	first, err := protocol.For(tb.b).TakeTrimmed(tb.ctx, s, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("take 1: %v, %v", first, err)
	}
	rest, err := protocol.For(tb.b).TakeTrimmed(tb.ctx, s, 10)
	if err != nil || len(rest) != 1 {
		t.Fatalf("take the rest: %v, %v", rest, err)
	}
	for i, r := range append(first, rest...) {
		want := fmt.Sprintf("j%02d", i)
		if r.ID != want || r.Trim != naming.TrimCap || r.Error != "boom "+want || r.Envelope == nil || r.Envelope.ID != want ||
			!r.DiedAt.Equal(epoch) || !r.TrimmedAt.Equal(epoch.Add(time.Millisecond)) {
			t.Fatalf("kept record %d: %+v; want %s, trimmed by the cap, its error and envelope, died at %v, trimmed a ms later", i, r, want, epoch)
		}
	}
	if again, err := protocol.For(tb.b).TakeTrimmed(tb.ctx, s, 10); err != nil || len(again) != 0 {
		t.Fatalf("taken twice: %v, %v", again, err)
	}
	if _, err := protocol.For(tb.b).TakeTrimmed(tb.ctx, s, 0); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("take 0: %v, want ErrInvalid", err)
	}

	// An operator's trim by age counts as age.
	tb.clock.Advance(time.Hour)
	aged, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns, DeadMaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(aged, tb.clock.Now)
	if n, err := deadletter.New(aged).Trim(tb.ctx, "q"); err != nil || n != 2 {
		t.Fatalf("trim by age: %d, %v; want 2", n, err)
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.DeadTrimmedAge != 2 || st.DeadTrimmedCap != 5 || st.Dead != 0 {
		t.Fatalf("stats %+v (%v): want 2 trimmed by age, 5 by the cap, none dead", st, err)
	}

	// A queue whose kept records wait is not forgotten.
	tb.clock.Advance(time.Millisecond)
	tb.killAll(t, c, batch(7, 3))
	if _, err := deadletter.New(tb.b).DeleteAll(tb.ctx, "q", deadletter.Filter{}, deadletter.BulkOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.Forget(tb.ctx, "q"); !errors.Is(err, broker.ErrQueueNotEmpty) || !strings.Contains(err.Error(), "OnDeadTrimmed") {
		t.Fatalf("forget with kept records: %v, want ErrQueueNotEmpty naming them", err)
	}
	if _, err := protocol.For(tb.b).TakeTrimmed(tb.ctx, s, 10); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.Forget(tb.ctx, "q"); err != nil {
		t.Fatalf("forget once taken: %v", err)
	}
}
