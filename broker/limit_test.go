package broker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
)

func TestQueueRateLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for i := range 20 {
		tb.enqueue(t, env("j"+string(rune('a'+i)), 0))
	}
	if err := tb.b.SetRateLimit(tb.ctx, "q", "", broker.RateLimit{Count: 10, Per: time.Second, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	if res := tb.claim(t, 100); len(res.Jobs) != 2 {
		t.Fatalf("claimed %d, want the burst of 2", len(res.Jobs))
	}
	res := tb.claim(t, 100)
	if len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(100*time.Millisecond)) {
		t.Fatalf("over the limit: claimed %d, next %v; want none until the next token at +100ms", len(res.Jobs), res.Next.Sub(epoch))
	}
	tb.clock.Advance(100 * time.Millisecond)
	if res := tb.claim(t, 100); len(res.Jobs) != 1 {
		t.Fatalf("one token later claimed %d, want 1", len(res.Jobs))
	}
	tb.clock.Advance(time.Second)
	if res := tb.claim(t, 100); len(res.Jobs) != 2 {
		t.Fatalf("after a quiet second claimed %d, want the burst of 2", len(res.Jobs))
	}
	st, err := tb.b.Stats(tb.ctx, "q")
	if err != nil || st.RateLimits[""] != (broker.RateLimit{Count: 10, Per: time.Second, Burst: 2}) || st.Scheduled != 15 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	// Cleared: everything due is claimed.
	if err := tb.b.SetRateLimit(tb.ctx, "q", "", broker.RateLimit{}); err != nil {
		t.Fatal(err)
	}
	if res := tb.claim(t, 100); len(res.Jobs) != 15 {
		t.Fatalf("without the limit claimed %d, want 15", len(res.Jobs))
	}
}

func TestTypeRateLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sms := func(id string) *job.Envelope { e := env(id, 0); e.Type = "sms.send"; return e }
	tb.enqueue(t, sms("s1"), sms("s2"), env("m1", 0), sms("s3"), env("m2", 0))
	if err := tb.b.SetRateLimit(tb.ctx, "q", "sms.send", broker.RateLimit{Count: 1, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "m1,m2,s1" {
		t.Fatalf("claimed %q, want one sms and the others", got)
	}
	// The others wait for their tokens, one a second, with no attempt spent.
	for i, id := range []string{"s2", "s3"} {
		info, err := tb.b.Job(tb.ctx, "q", id)
		if err != nil || !info.ReadyAt.Equal(epoch.Add(time.Duration(i+1)*time.Second)) || info.Attempts != 0 {
			t.Fatalf("%s: %+v, %v; want ready at +%ds, no attempt", id, info, err, i+1)
		}
	}
	if res := tb.claim(t, 10); len(res.Jobs) != 0 || !res.Next.Equal(epoch.Add(time.Second)) {
		t.Fatalf("claimed %v next %v", ids(res.Jobs), res.Next)
	}
	tb.clock.Advance(time.Second)
	if res := tb.claim(t, 10); strings.Join(ids(res.Jobs), ",") != "s2" {
		t.Fatalf("a second later claimed %v, want s2", ids(res.Jobs))
	}
	tb.clock.Advance(time.Second)
	if res := tb.claim(t, 10); strings.Join(ids(res.Jobs), ",") != "s3" {
		t.Fatalf("two seconds later claimed %v, want s3", ids(res.Jobs))
	}
	for _, r := range []broker.RateLimit{{Count: -1}, {Count: 1, Per: 0}, {Count: 1, Per: time.Second, Burst: -1}} {
		if err := tb.b.SetRateLimit(tb.ctx, "q", "", r); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", r, err)
		}
	}
	if err := tb.b.SetRateLimit(tb.ctx, "q", "bad type", broker.RateLimit{Count: 1, Per: time.Second}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("bad type: %v", err)
	}
}
