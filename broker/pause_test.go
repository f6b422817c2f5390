package broker_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

func TestPauseQueue(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 3} {
		t.Run(map[int]string{1: "plain", 3: "sharded"}[shards], func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			if shards > 1 {
				if err := tb.b.DeclareQueue(tb.ctx, "q", shards); err != nil {
					t.Fatal(err)
				}
			}
			tb.enqueue(t, env("a", 0), env("b", 0), env("c", time.Second))
			if err := tb.b.Pause(tb.ctx, "q", ""); err != nil {
				t.Fatal(err)
			}
			if err := tb.b.Pause(tb.ctx, "q", ""); err != nil { // idempotent
				t.Fatal(err)
			}
			tb.clock.Advance(2 * time.Second)
			res := tb.claim(t, 10)
			if len(res.Jobs) != 0 || !res.Paused || !res.Next.IsZero() {
				t.Fatalf("claim of a paused queue: %v paused %v next %v", ids(res.Jobs), res.Paused, res.Next)
			}
			st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
			if err != nil || !st.Paused || st.Due != 3 {
				t.Fatalf("stats %+v, %v", st, err)
			}
			// Enqueue and cancel go on while paused.
			tb.enqueue(t, env("d", 0))
			if _, err := tb.b.Cancel(tb.ctx, "q", "d"); err != nil {
				t.Fatal(err)
			}
			if _, err := tb.b.Resume(tb.ctx, "q", ""); err != nil {
				t.Fatal(err)
			}
			res = tb.claim(t, 10)
			if got := strings.Join(ids(res.Jobs), ","); len(res.Jobs) != 3 || res.Paused {
				t.Fatalf("after resume claimed %q", got)
			}
			if st, _ := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); st.Paused {
				t.Fatal("still paused after resume")
			}
		})
	}
}

func TestPauseType(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sms := func(id string) *job.Envelope { e := env(id, 0); e.Type = "sms.send"; return e }
	tb.enqueue(t, sms("s1"), env("m1", 0), sms("s2"), env("m2", 0))
	if err := tb.b.Pause(tb.ctx, "q", "sms.send"); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "m1,m2" {
		t.Fatalf("claimed %q, want only the unpaused type", got)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.Paused || !slices.Equal(st.PausedTypes, []string{"sms.send"}) || st.Parked != 2 || st.Scheduled != 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	// A parked job is still pending: found, rescheduled, cancelled, and
	// its id is taken.
	if info, err := tb.b.Job(tb.ctx, "q", "s1"); err != nil || info.State != job.StateScheduled {
		t.Fatalf("Job(s1): %+v, %v", info, err)
	}
	if err := tb.b.Enqueue(tb.ctx, sms("s1")); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("enqueue over a parked id: %v", err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "s2"); err != nil {
		t.Fatal(err)
	}
	// Jobs of the type that come due while it is paused are parked too.
	tb.enqueue(t, sms("s3"))
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("claimed %v while the type is paused", ids(res.Jobs))
	}
	n, err := tb.b.Resume(tb.ctx, "q", "sms.send")
	if err != nil || n != 2 {
		t.Fatalf("Resume of the type: %d, %v; want 2 jobs back", n, err)
	}
	res = tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "s1,s3" {
		t.Fatalf("after resume claimed %q", got)
	}
	if res.Jobs[0].Attempt != 1 {
		t.Fatalf("a parked job spent an attempt: %d", res.Jobs[0].Attempt)
	}
	for _, bad := range []func() error{
		func() error { return tb.b.Pause(tb.ctx, "q", "a type") },
		func() error { return tb.b.Pause(tb.ctx, "q{x}", "") },
		func() error { _, err := tb.b.Resume(tb.ctx, "q", "a\ttype"); return err },
		func() error { _, err := tb.b.Resume(tb.ctx, "", ""); return err },
	} {
		if err := bad(); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("bad input: %v, want ErrInvalid", err)
		}
	}
}
