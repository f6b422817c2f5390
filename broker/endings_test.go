package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestReplaceOfAParkedOrHeldJob: a job parked by a paused type or held back by
// its type's cap is scheduled for every operation: Job reports it so, and
// Replace replaces it (its new ready time and arguments), as Reschedule
// and Cancel do; a job a worker holds is still refused with ErrInProgress.
// Pushing back an order's timeout works while its type is paused.
func TestReplaceOfAParkedOrHeldJob(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typed := func(id, typ string) *job.Envelope { e := env(id, 0); e.Type = typ; return e }
	tb.enqueue(t, typed("parked", "order.timeout"), typed("r1", "report.build"), typed("zheld", "report.build"))
	if err := tb.b.Pause(tb.ctx, "q", "order.timeout"); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "report.build", 1); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 10)
	if len(res.Jobs) != 1 || res.Jobs[0].ID != "r1" {
		t.Fatalf("claimed %v, want r1 alone", ids(res.Jobs))
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Parked != 1 || st.Held != 1 {
		t.Fatalf("stats %+v, %v; want one parked and one held", st, err)
	}
	for _, id := range []string{"parked", "zheld"} {
		if info, err := tb.b.Job(tb.ctx, "q", id); err != nil || info.State != job.StateScheduled {
			t.Fatalf("Job(%s): %+v, %v", id, info, err)
		}
		e := typed(id, "order.timeout")
		if id == "zheld" {
			e.Type = "report.build"
		}
		e.Delay, e.Replace, e.Payload = time.Hour, true, []byte(`{"n":2}`)
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatalf("replace %s: %v", id, err)
		}
		info, err := tb.b.Job(tb.ctx, "q", id)
		if err != nil || info.State != job.StateScheduled || time.Until(info.ReadyAt) < 59*time.Minute || string(info.Envelope.Payload) != `{"n":2}` {
			t.Fatalf("replaced %s: %+v, %v", id, info, err)
		}
	}
	st, err = testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Parked != 0 || st.Held != 0 || st.Scheduled != 2 {
		t.Fatalf("stats after the replaces %+v, %v; want both scheduled", st, err)
	}
	// A running job is not replaced.
	e := typed("r1", "report.build")
	e.Replace = true
	if err := tb.b.Enqueue(tb.ctx, e); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("replace of a running job: %v, want ErrInProgress", err)
	}
	// The replaced jobs come due, and are parked and held again.
	for _, id := range []string{"parked", "zheld"} {
		if _, err := tb.b.Reschedule(tb.ctx, "q", id, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("claimed %v; the type is paused and the other at its cap", ids(res.Jobs))
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Parked != 1 || st.Held != 1 {
		t.Fatalf("stats %+v, %v; want parked and held again", st, err)
	}
}
