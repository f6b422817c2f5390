package broker_test

import (
	"bytes"
	"testing"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestDeadRecordKeepsBodyByteForByte: a dead record holds the body exactly as
// it was stored, whether it is an envelope with HTML characters in its
// payload or a corrupt body that happens to be JSON with whitespace.
func TestDeadRecordKeepsBodyByteForByte(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	e := env("html", 0)
	e.Payload = []byte(`{"s":"<b>a & b</b>"}`)
	tb.enqueue(t, e, env("spaced", 0))
	tb.rdb.HSet(tb.ctx, tb.key("q", "jobs"), "spaced", `[ 1, "<x>" ]`)
	for _, c := range tb.claim(t, 2).Jobs {
		if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Body: c.Body, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		r, err := deadletter.New(tb.b).Get(tb.ctx, "q", c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Body, c.Body) {
			t.Errorf("dead record of %s has body %q, want %q as stored", c.ID, r.Body, c.Body)
		}
		if c.ID == "html" && (r.Envelope == nil || !bytes.Equal(r.Envelope.Payload, e.Payload)) {
			t.Errorf("dead envelope of html = %+v, want payload %q", r.Envelope, e.Payload)
		}
	}
	// Redrive hands the payload back unchanged.
	if err := deadletter.New(tb.b).Redrive(tb.ctx, "q", 0, "html"); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 1)
	if len(res.Jobs) != 1 || res.Jobs[0].Err != nil || !bytes.Equal(res.Jobs[0].Envelope.Payload, e.Payload) {
		t.Fatalf("redriven job %+v, want payload %q", res.Jobs, e.Payload)
	}
}

// TestEnqueueRejectsInvalidBackoff: a per-job backoff that the worker could
// not use is refused at enqueue, not stored.
func TestEnqueueRejectsInvalidBackoff(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	e := env("a", 0)
	e.Backoff = &job.Backoff{Initial: 0, Multiplier: 2}
	if err := tb.b.Enqueue(tb.ctx, e); err == nil {
		t.Fatal("Enqueue accepted a backoff with a zero initial delay")
	}
	if n, _ := tb.rdb.Exists(tb.ctx, tb.key("q", "jobs"), tb.key("q", "scheduled")).Result(); n != 0 {
		t.Fatalf("%d keys written by a refused enqueue", n)
	}
}
