package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// bypassPayloads are payloads that Redis's cjson cannot decode. A claim
// that read a job's type by decoding its whole body got no type for them,
// and leased the job past its type's pause, cap and rate limit; the type is
// now read from the header of the body, before the payload.
var bypassPayloads = []struct {
	name    string
	payload []byte
}{
	{"deep nesting", []byte(strings.Repeat("[", 1001) + strings.Repeat("]", 1001))}, // cjson stops at 1,000 levels
	{"lone surrogate", []byte(`{"x":"\ud800"}`)},                                    // 14 bytes
}

// controlled sets up queue q with a paused type, a type capped at 1 and a
// type limited to 1 a minute, and enqueues three jobs of each with payload p
// and one plain job.
func controlled(t *testing.T, tb *testBundle, p []byte) {
	t.Helper()
	if err := tb.b.Pause(tb.ctx, "q", "ctl.paused"); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "ctl.capped", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetRateLimit(tb.ctx, "q", "ctl.limited", job.RateLimit{Count: 1, Per: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var envs []*job.Envelope
	for _, typ := range []string{"ctl.paused", "ctl.capped", "ctl.limited"} {
		for i := range 3 {
			e := env(fmt.Sprintf("%s-%d", typ, i), 0)
			e.Type, e.Payload = typ, p
			envs = append(envs, e)
		}
	}
	tb.enqueue(t, append(envs, env("plain", 0))...)
}

// TestBypassPayloadsKeepTypeControls: jobs whose payloads cjson cannot
// decode (nested 1,001 deep, a lone surrogate) are still parked while their
// type is paused, held at their type's concurrency cap and deferred by its
// rate limit; the one capped and the one limited job that may run are
// claimed with their payload intact.
func TestBypassPayloadsKeepTypeControls(t *testing.T) {
	t.Parallel()
	for _, bp := range bypassPayloads {
		t.Run(bp.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			controlled(t, tb, bp.payload)
			res := tb.claim(t, 100)
			if got := strings.Join(ids(res.Jobs), ","); got != "ctl.capped-0,ctl.limited-0,plain" {
				t.Fatalf("claimed %q; want one capped job, one limited job and the plain one", got)
			}
			for _, c := range res.Jobs {
				if c.Err != nil || c.ID != "plain" && !bytes.Equal(c.Envelope.Payload, bp.payload) {
					t.Fatalf("claimed %s: %v", c.ID, c.Err)
				}
			}
			// A second later nothing more: the limit's next token is a
			// minute away and the capped job's lease is live.
			tb.clock.Advance(time.Second)
			if res := tb.claim(t, 100); len(res.Jobs) != 0 {
				t.Fatalf("claimed %v past the controls", ids(res.Jobs))
			}
			st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
			if err != nil || st.Parked != 3 || st.Held != 2 || st.Processing != 3 || st.Scheduled != 2 {
				t.Fatalf("stats %+v, %v; want 3 parked, 2 held, 3 processing, 2 deferred", st, err)
			}
		})
	}
}

// TestBodiesWithoutHeader: bodies stored before the header layout (payload
// first) still have their type read, by decoding them; one that does not
// decode is leased only with an error wrapping job.ErrCorrupt (the worker
// dead-letters it unrun) while a type control is set, never as a job of no
// type. With no type control set, nothing reads the type.
func TestBodiesWithoutHeader(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	store := func(id, body string) {
		t.Helper()
		jobs, sched := tb.key("q", "jobs"), tb.key("q", "scheduled")
		if err := tb.rdb.HSet(tb.ctx, jobs, id, body).Err(); err != nil {
			t.Fatal(err)
		}
		if err := tb.rdb.ZAdd(tb.ctx, sched, redis.Z{Score: float64(epoch.UnixMilli()), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deep := strings.Repeat("[", 1001) + strings.Repeat("]", 1001)
	store("old-free", `{"p":{"n":1},"t":"free"}`)
	store("old-deep", `{"p":`+deep+`,"t":"free"}`)
	// No type control: both are leased as they are.
	res := tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "old-deep,old-free" || res.Jobs[0].Err != nil || res.Jobs[1].Err != nil {
		t.Fatalf("claimed %q (%v, %v)", got, res.Jobs[0].Err, res.Jobs[1].Err)
	}

	tb = setup(t)
	if err := tb.b.Pause(tb.ctx, "q", "ctl.paused"); err != nil {
		t.Fatal(err)
	}
	store("old-paused", `{"p":{"t":"free"},"t":"ctl.paused"}`)
	store("old-free", `{"p":{"n":1},"t":"free"}`)
	store("old-deep", `{"p":`+deep+`,"t":"ctl.paused"}`)
	store("old-surrogate", `{"p":{"x":"\ud800"},"t":"ctl.paused"}`)
	res = tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "old-deep,old-free,old-surrogate" {
		t.Fatalf("claimed %q; want the unreadable ones (to dead-letter) and the free one", got)
	}
	for _, c := range res.Jobs {
		switch c.ID {
		case "old-free":
			if c.Err != nil || c.Envelope.Type != "free" {
				t.Fatalf("old-free: %+v", c)
			}
		default:
			if !errors.Is(c.Err, job.ErrCorrupt) || !strings.Contains(c.Err.Error(), "could not read its type") {
				t.Fatalf("%s: err %v; want ErrCorrupt, the type unread", c.ID, c.Err)
			}
			if c.Envelope == nil || c.Envelope.Type != "ctl.paused" {
				t.Fatalf("%s: envelope %+v; Go decodes it, for the dead record", c.ID, c.Envelope)
			}
		}
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Parked != 1 {
		t.Fatalf("stats %+v, %v; want old-paused parked", st, err)
	}
}

// TestReplayedClaimKeepsTheUnreadableMark: a claim sent again (its reply
// lost) reports the jobs whose type it could not read as it did the first
// time.
func TestReplayedClaimKeepsTheUnreadableMark(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Pause(tb.ctx, "q", "ctl.paused"); err != nil {
		t.Fatal(err)
	}
	if err := tb.rdb.HSet(tb.ctx, tb.key("q", "jobs"), "deep", `{"p":`+strings.Repeat("[", 1001)+strings.Repeat("]", 1001)+`,"t":"x"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.rdb.ZAdd(tb.ctx, tb.key("q", "scheduled"), redis.Z{Score: float64(epoch.UnixMilli()), Member: "deep"}).Err(); err != nil {
		t.Fatal(err)
	}
	tb.enqueue(t, env("plain", 0))
	p := protocol.For(tb.b)
	s := testkit.Shards(t, tb.b, "q")[0]
	for range 2 {
		res, err := p.Claim(tb.ctx, s, protocol.Caller{ID: "w", Lease: time.Minute}, "c1", 10, time.Minute)
		if err != nil || len(res.Jobs) != 2 {
			t.Fatalf("claim: %v, %v", ids(res.Jobs), err)
		}
		for _, c := range res.Jobs {
			if (c.ID == "deep") != errors.Is(c.Err, job.ErrCorrupt) {
				t.Fatalf("%s: err %v", c.ID, c.Err)
			}
		}
	}
}

// TestExpiredJobKeepsItsBody: a job that expires before it starts goes to
// the dead letters with its body byte for byte, its type and its
// uniqueness remembered (job.UniqueIncludeDead), whatever its payload holds,
// and also when its body has no header and does not decode in the script
// (kept in base64 then).
func TestExpiredJobKeepsItsBody(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, bp := range bypassPayloads {
		e := env(strings.ReplaceAll(bp.name, " ", "-"), 0)
		e.Type, e.Payload, e.ExpireAt = "exp", bp.payload, epoch.Add(time.Second)
		e.Unique, e.UniqueFor, e.UniqueDead = true, time.Hour, true
		tb.enqueue(t, e)
	}
	old := `{"p":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `,"t":"exp","x":"` + fmt.Sprint(epoch.Add(time.Second).UnixMilli()) + `"}`
	if err := tb.rdb.HSet(tb.ctx, tb.key("q", "jobs"), "old", old).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.rdb.ZAdd(tb.ctx, tb.key("q", "scheduled"), redis.Z{Score: float64(epoch.UnixMilli()), Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(2 * time.Second)
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("claimed expired jobs %v", ids(res.Jobs))
	}
	for _, bp := range bypassPayloads {
		id := strings.ReplaceAll(bp.name, " ", "-")
		r, err := deadletter.New(tb.b).Get(tb.ctx, "q", id)
		if err != nil || r.Type != "exp" || r.Reason != "expired" || r.Envelope == nil || !bytes.Equal(r.Envelope.Payload, bp.payload) {
			t.Fatalf("%s: dead record %+v, %v", id, r, err)
		}
		again := env(id, 0)
		again.Unique, again.UniqueFor = true, time.Hour
		var dup *broker.DuplicateError
		if err := tb.b.Enqueue(tb.ctx, again); !errors.As(err, &dup) {
			t.Fatalf("%s: enqueued again (%v); its id is remembered after its dead ending", id, err)
		}
	}
	r, err := deadletter.New(tb.b).Get(tb.ctx, "q", "old")
	if err != nil || string(r.Body) != old || r.Reason != "expired" {
		t.Fatalf("old: dead record %+v, %v; want its body byte for byte", r, err)
	}
}
