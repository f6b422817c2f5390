package broker_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// Every batch entry point refuses bad input with an error that names it,
// and a refused call changes nothing stored.
func TestBatchBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	cb := env("", 0)
	id, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "b1", OnSuccess: cb})
	if err != nil || id != "b1" {
		t.Fatalf("create: %q, %v", id, err)
	}
	if err := tb.b.AddToBatch(tb.ctx, "b1", env("m1", 0)); err != nil {
		t.Fatal(err)
	}
	before, err := tb.b.Batch(tb.ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	member := env("m2", 0)
	member.Batch = "other"
	replace := env("m3", 0)
	replace.Replace = true
	inCallback := env("", 0)
	inCallback.Batch = "b1"
	for _, c := range []struct {
		name string
		call func() error
		is   error
		says string
	}{
		{"create with a bad id", func() error { _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "a b"}); return err }, job.ErrInvalid, `"a b"`},
		{"create with a long id", func() error {
			_, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: strings.Repeat("x", naming.MaxBatchIDLen+1)})
			return err
		}, job.ErrInvalid, "batch id"},
		{"create with a negative keep", func() error { _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{Keep: -time.Second}); return err }, job.ErrInvalid, "keep -1s is negative"},
		{"create with a member as callback", func() error {
			_, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{OnComplete: inCallback})
			return err
		}, job.ErrInvalid, "callback cannot itself be a batch member"},
		{"create with a callback of no type", func() error {
			_, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{OnSuccess: &job.Envelope{Queue: "q"}})
			return err
		}, job.ErrInvalid, "success callback"},
		{"create a taken id", func() error { _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "b1"}); return err }, broker.ErrDuplicate, `batch "b1" exists`},
		{"add to a bad id", func() error { return tb.b.AddToBatch(tb.ctx, "", env("x", 0)) }, job.ErrInvalid, "batch id"},
		{"add to no batch", func() error { return tb.b.AddToBatch(tb.ctx, "nope", env("x", 0)) }, broker.ErrBatchNotFound, `"nope"`},
		{"add a nil member", func() error { return tb.b.AddToBatch(tb.ctx, "b1", env("x", 0), nil) }, job.ErrInvalid, "member 2 of 2 is nil"},
		{"add another batch's member", func() error { return tb.b.AddToBatch(tb.ctx, "b1", member) }, job.ErrInvalid, `is of batch "other"`},
		{"add a replacing member", func() error { return tb.b.AddToBatch(tb.ctx, "b1", replace) }, job.ErrInvalid, "asks to replace"},
		{"add one member twice", func() error { return tb.b.AddToBatch(tb.ctx, "b1", env("x", 0), env("x", 0)) }, job.ErrInvalid, "listed twice"},
		{"seal a bad id", func() error { return tb.b.SealBatch(tb.ctx, "a/b") }, job.ErrInvalid, "batch id"},
		{"seal no batch", func() error { return tb.b.SealBatch(tb.ctx, "nope") }, broker.ErrBatchNotFound, `"nope"`},
		{"read no batch", func() error { _, err := tb.b.Batch(tb.ctx, "nope"); return err }, broker.ErrBatchNotFound, `"nope"`},
		{"list with a bad limit", func() error { _, err := tb.b.Batches(tb.ctx, "", 0); return err }, job.ErrInvalid, "limit 0"},
		{"list with a bad cursor", func() error { _, err := tb.b.Batches(tb.ctx, "nope", 10); return err }, broker.ErrBadCursor, "malformed page cursor"},
	} {
		err := c.call()
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.is, c.says)
		}
	}
	after, err := tb.b.Batch(tb.ctx, "b1")
	if err != nil || *after != *before {
		t.Fatalf("after the refused calls the batch is %+v (%v); it was %+v", after, err, before)
	}
	if n, _ := tb.rdb.HLen(tb.ctx, tb.key("q", "jobs")).Result(); n != 1 {
		t.Fatalf("%d jobs stored; want the one member added", n)
	}
	// Sealed: no more members, and nothing is enqueued by the refused add.
	if err := tb.b.SealBatch(tb.ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.AddToBatch(tb.ctx, "b1", env("late", 0)); !errors.Is(err, broker.ErrBatchSealed) {
		t.Fatalf("add to a sealed batch: %v", err)
	}
	if _, err := tb.b.Job(tb.ctx, "q", "late"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("a member refused by a sealed batch was stored: %v", err)
	}
}

// The status counts follow the members' endings, the callbacks fire once
// when the last one ends, and a list shows the batch newest first.
func TestBatchStatusCounts(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{OnSuccess: env("", 0), OnComplete: env("", 0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.b.AddToBatch(tb.ctx, id, env("a", 0), env("b", 0)); err != nil {
		t.Fatal(err)
	}
	// Adding the same members again (a retried call) counts nothing twice.
	if err := tb.b.AddToBatch(tb.ctx, id, env("a", 0)); err != nil && !errors.Is(err, broker.ErrDuplicate) {
		t.Fatal(err)
	}
	s, err := tb.b.Batch(tb.ctx, id)
	if err != nil || s.Total != 2 || s.Pending != 2 || s.Sealed || s.Complete {
		t.Fatalf("open batch: %+v, %v", s, err)
	}
	if s.OnSuccess != "q/"+(id+":success") || s.OnComplete != "q/"+(id+":complete") {
		t.Fatalf("callbacks %q %q", s.OnSuccess, s.OnComplete)
	}
	if err := tb.b.SealBatch(tb.ctx, id); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 10)
	if len(res.Jobs) != 2 {
		t.Fatalf("claimed %v", ids(res.Jobs))
	}
	ack := func(c protocol.Claimed) {
		t.Helper()
		// As a worker does: the ending is recorded with the ack, then
		// counted in the batch.
		if _, err := testkit.Drive(tb.b).Settle(tb.ctx, protocol.Op{Kind: protocol.OpAck, Lease: c.Lease, Batch: c.Envelope.Batch}); err != nil {
			t.Fatal(err)
		}
		if err := protocol.For(tb.b).EndBatch(tb.ctx, c.Lease.Shard, []protocol.BatchEnd{{ID: c.ID, Batch: c.Envelope.Batch}}); err != nil {
			t.Fatal(err)
		}
	}
	ack(res.Jobs[0])
	s, _ = tb.b.Batch(tb.ctx, id)
	if s.Succeeded != 1 || s.Pending != 1 || s.SuccessFired || s.CompleteFired {
		t.Fatalf("after one ack: %+v", s)
	}
	ack(res.Jobs[1])
	s, _ = tb.b.Batch(tb.ctx, id)
	if s.Succeeded != 2 || s.Pending != 0 || !s.Complete || !s.SuccessFired || !s.CompleteFired || s.ExpiresAt.IsZero() {
		t.Fatalf("after both acks: %+v", s)
	}
	for _, cb := range []string{(id + ":success"), (id + ":complete")} {
		info, err := tb.b.Job(tb.ctx, "q", cb)
		if err != nil || info.Envelope.Headers["delayq-batch"] != id {
			t.Fatalf("callback %s: %+v, %v", cb, info, err)
		}
	}
	// Sealing again enqueues nothing twice.
	if err := tb.b.SealBatch(tb.ctx, id); err != nil {
		t.Fatal(err)
	}
	if n, _ := tb.rdb.ZCard(tb.ctx, tb.key("q", "scheduled")).Result(); n != 2 {
		t.Fatalf("%d jobs scheduled after a second seal; want the 2 callbacks", n)
	}
	tb.clock.Advance(time.Millisecond)
	other, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{})
	if err != nil {
		t.Fatal(err)
	}
	page, err := tb.b.Batches(tb.ctx, "", 10)
	list := page.Batches
	if err != nil || len(list) != 2 || page.Next != "" {
		t.Fatalf("list: %+v, %v", page, err)
	}
	if list[0].ID != other || list[1].ID != id || list[0].Total != 0 || list[1].Succeeded != 2 {
		t.Fatalf("list %+v %+v; want newest first (%s, then %s)", list[0], list[1], other, id)
	}
}

// TestCallbackMiddleware: a batch callback enqueued by a call whose context
// carries producer middleware (WithCallbackMiddleware) goes through it
// before it is stored, with its id and queue, and what the middleware
// writes into its headers is stored; a call without it runs none.
func TestCallbackMiddleware(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var seen []string
	mw := func(next job.Enqueuer) job.Enqueuer {
		return job.EnqueuerFunc(func(ctx context.Context, envs ...*job.Envelope) error {
			for _, e := range envs {
				seen = append(seen, e.Queue+"/"+e.ID)
				h := map[string]string{"seen": "yes"}
				maps.Copy(h, e.Headers)
				e.Headers = h
			}
			return next.Enqueue(ctx, envs...)
		})
	}
	for _, id := range []string{"plain", "wrapped"} {
		if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id, OnSuccess: env("", 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.SealBatch(tb.ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	ctx := broker.WithCallbackMiddleware(tb.ctx, mw)
	if err := tb.b.SealBatch(ctx, "wrapped"); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(ctx, "wrapped"); err != nil { // fired already: nothing enqueued again
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != "q/"+("wrapped"+":success") {
		t.Fatalf("middleware saw %v, want the wrapped batch's success callback once", seen)
	}
	for id, want := range map[string]string{"plain": "", "wrapped": "yes"} {
		info, err := tb.b.Job(tb.ctx, "q", (id + ":success"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := job.Decode(info.Body)
		if err != nil {
			t.Fatal(err)
		}
		if got.Headers["seen"] != want || got.Headers["delayq-batch"] != id {
			t.Errorf("callback of %s stored with headers %v, want seen=%q and the batch header", id, got.Headers, want)
		}
	}
}

// TestBatchesPagesByCursor: Batches pages newest first with a cursor: each
// batch once, in (created, id) descending order, also when several were
// created in one millisecond and when a batch is created between two
// pages (it is on no later page, and shifts nothing).
func TestBatchesPagesByCursor(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	create := func(id string) {
		t.Helper()
		if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	create("a-old")
	tb.clock.Advance(time.Millisecond)
	for _, id := range []string{"m-1", "m-3", "m-2", "m-4"} { // one millisecond
		create(id)
	}
	tb.clock.Advance(time.Millisecond)
	create("z-new")
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("no end after 10 pages: %v", seen)
		}
		page, err := tb.b.Batches(tb.ctx, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Batches {
			seen = append(seen, s.ID)
		}
		if pages == 0 {
			tb.clock.Advance(time.Millisecond)
			create("later") // newer than every page: not listed after this one
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if got := strings.Join(seen, ","); got != "z-new,m-4,m-3,m-2,m-1,a-old" {
		t.Fatalf("listed %s; want z-new,m-4,m-3,m-2,m-1,a-old", got)
	}
}
