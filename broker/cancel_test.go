package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
)

// TestCancel: a waiting job is removed (Running false) and a running one
// asked to stop (Running true), which its heartbeat learns; no such job
// is ErrNotFound.
func TestCancel(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("waiting", time.Hour), env("running", 0))
	if res, err := tb.b.Cancel(tb.ctx, "q", "waiting"); err != nil || res.Running {
		t.Fatalf("Cancel of a scheduled job: %+v, %v", res, err)
	}
	c := tb.claim(t, 1).Jobs[0]
	if err := testkit.Drive(tb.b).Extend(tb.ctx, time.Minute, c.Lease); err != nil {
		t.Fatalf("extend before the cancel: %v", err)
	}
	if res, err := tb.b.Cancel(tb.ctx, "q", "running"); err != nil || !res.Running {
		t.Fatalf("Cancel of a running job: %+v, %v", res, err)
	}
	// The heartbeat learns of it: still extended, and told.
	if err := testkit.Drive(tb.b).Extend(tb.ctx, time.Minute, c.Lease); !errors.Is(err, broker.ErrCancelled) {
		t.Fatalf("extend after the cancel: %v, want ErrCancelled", err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "nothing"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Cancel of no job: %v", err)
	}
}

// A running job asked to stop that ends some other way (its handler
// finished anyway, failed, or was released at shutdown) leaves no mark
// behind: the next lease of the id has another token.
func TestCancelMarkEndsWithTheLease(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("acked", 0), env("retried", 0), env("released", 0))
	jobs := tb.claim(t, 3).Jobs
	if len(jobs) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(jobs))
	}
	leases := map[string]protocol.Lease{}
	for _, c := range jobs {
		if res, err := tb.b.Cancel(tb.ctx, "q", c.ID); err != nil || !res.Running {
			t.Fatalf("Cancel(%s): %+v, %v", c.ID, res, err)
		}
		leases[c.ID] = c.Lease
	}
	cancels := testkit.Keys(t, tb.b, "q").Cancels
	if n := tb.rdb.HLen(tb.ctx, cancels).Val(); n != 3 {
		t.Fatalf("%d cancel marks, want 3", n)
	}
	d := testkit.Drive(tb.b)
	if err := d.Ack(tb.ctx, leases["acked"]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if _, err := d.Retry(tb.ctx, leases["retried"], time.Hour, env("retried", 0)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := d.Release(tb.ctx, leases["released"]); err != nil {
		t.Fatalf("release: %v", err)
	}
	if marks := tb.rdb.HKeys(tb.ctx, cancels).Val(); len(marks) != 0 {
		t.Fatalf("cancel marks left after the leases ended: %v", marks)
	}
}
