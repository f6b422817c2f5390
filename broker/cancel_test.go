package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/testkit"
)

func TestCancelJob(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("waiting", time.Hour), env("running", 0))
	if res, err := tb.b.CancelJob(tb.ctx, "q", "waiting"); err != nil || res.Running {
		t.Fatalf("CancelJob of a scheduled job: %+v, %v", res, err)
	}
	c := tb.claim(t, 1).Jobs[0]
	// Cancel keeps its meaning: a running job is left alone.
	if err := tb.b.Cancel(tb.ctx, "q", "running"); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("Cancel of a running job: %v", err)
	}
	if err := testkit.Drive(tb.b).Extend(tb.ctx, time.Minute, c.Lease); err != nil {
		t.Fatalf("extend before the cancel: %v", err)
	}
	if res, err := tb.b.CancelJob(tb.ctx, "q", "running"); err != nil || !res.Running {
		t.Fatalf("CancelJob of a running job: %+v, %v", res, err)
	}
	// The heartbeat learns of it: still extended, and told.
	if err := testkit.Drive(tb.b).Extend(tb.ctx, time.Minute, c.Lease); !errors.Is(err, broker.ErrCanceled) {
		t.Fatalf("extend after the cancel: %v, want ErrCanceled", err)
	}
	if _, err := tb.b.CancelJob(tb.ctx, "q", "nothing"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("CancelJob of no job: %v", err)
	}
}
