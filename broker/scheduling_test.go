package broker_test

import (
	"errors"
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

// ackRemember acks a claimed job as a worker does for a job.Unique one:
// with its uniqueness window.
func (tb *testBundle) ackRemember(t *testing.T, c protocol.Claimed) {
	t.Helper()
	res, err := testkit.Drive(tb.b).Settle(tb.ctx, protocol.Op{Kind: protocol.OpAck, Lease: c.Lease, Remember: c.Envelope.UniqueFor})
	if err != nil || res[0].Err != nil {
		t.Fatalf("ack: %v %v", err, res)
	}
}

func uniqueEnv(id string, ttl time.Duration) *job.Envelope {
	e := env(id, 0)
	e.Unique, e.UniqueFor = true, ttl
	return e
}

func wantDuplicate(t *testing.T, err error, queue, id string, ended bool) {
	t.Helper()
	var dup *broker.DuplicateError
	if !errors.Is(err, broker.ErrDuplicate) || !errors.As(err, &dup) || dup.ID != id || dup.Queue != queue || dup.Ended != ended {
		t.Fatalf("err = %v, want a DuplicateError for %q in %q (ended %v)", err, id, queue, ended)
	}
	if !strings.Contains(err.Error(), id) {
		t.Fatalf("error %q does not name the id %q", err, id)
	}
}

func TestUniqueWindow(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		t.Run(map[int]string{1: "plain", 4: "sharded"}[shards], func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			if shards > 1 {
				if err := tb.b.DeclareQueue(tb.ctx, "q", shards); err != nil {
					t.Fatal(err)
				}
			}
			tb.enqueue(t, uniqueEnv("u1", time.Minute))
			// Pending: refused, unique or not.
			wantDuplicate(t, tb.b.Enqueue(tb.ctx, uniqueEnv("u1", time.Minute)), "q", "u1", false)
			wantDuplicate(t, tb.b.Enqueue(tb.ctx, env("u1", 0)), "q", "u1", false)

			res := tb.claim(t, 10)
			if len(res.Jobs) != 1 || !res.Jobs[0].Envelope.Unique || res.Jobs[0].Envelope.UniqueFor != time.Minute {
				t.Fatalf("claimed %+v", res.Jobs)
			}
			tb.ackRemember(t, res.Jobs[0])

			// Within the window after success: refused, naming the id.
			tb.clock.Advance(59 * time.Second)
			wantDuplicate(t, tb.b.Enqueue(tb.ctx, uniqueEnv("u1", time.Minute)), "q", "u1", true)
			// An enqueue without Unique is not checked against the memory.
			other := env("u1", time.Hour)
			tb.enqueue(t, other)
			if _, err := tb.b.Cancel(tb.ctx, "q", "u1"); err != nil {
				t.Fatal(err)
			}

			// After the window: accepted, and the memory is trimmed.
			tb.clock.Advance(2 * time.Second)
			tb.enqueue(t, uniqueEnv("u1", time.Minute))
			for _, s := range testkit.Shards(t, tb.b, "q") {
				if n, _ := tb.rdb.ZCard(tb.ctx, s.Keys().Unique).Result(); n != 0 {
					t.Fatalf("shard %s remembers %d ids after the window", s.Name(), n)
				}
			}
		})
	}
}

func TestUniqueByContent(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[struct{ User string }]("remind", job.Queue("q"), job.Unique(time.Hour))
	a, err := typ.Enqueue(tb.ctx, tb.b, struct{ User string }{"ann"})
	if err != nil {
		t.Fatal(err)
	}
	if want := naming.UniqueID("remind", []byte(`{"User":"ann"}`)); a.ID != want {
		t.Fatalf("id %q, want the derived %q", a.ID, want)
	}
	// Same type and arguments: the same job, refused while pending.
	_, err = typ.Enqueue(tb.ctx, tb.b, struct{ User string }{"ann"})
	wantDuplicate(t, err, "q", a.ID, false)
	// Other arguments: another job.
	if _, err := typ.Enqueue(tb.ctx, tb.b, struct{ User string }{"bob"}); err != nil {
		t.Fatal(err)
	}
	// After success, still refused within the hour; after it, accepted.
	tb.clock.Advance(time.Second)
	for _, c := range tb.claim(t, 10).Jobs {
		tb.ackRemember(t, c)
	}
	_, err = typ.Enqueue(tb.ctx, tb.b, struct{ User string }{"ann"})
	wantDuplicate(t, err, "q", a.ID, true)
	tb.clock.Advance(time.Hour + time.Second)
	if _, err := typ.Enqueue(tb.ctx, tb.b, struct{ User string }{"ann"}); err != nil {
		t.Fatal(err)
	}
}

func TestUniqueDeadEnding(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	kill := func(e *job.Envelope) {
		tb.enqueue(t, e)
		c := tb.claim(t, 1).Jobs[0]
		var ttl time.Duration
		if c.Envelope.UniqueDead {
			ttl = c.Envelope.UniqueFor
		}
		rec := &job.DeadRecord{Type: "t", Body: c.Body, Error: "boom", Attempts: 1}
		res, err := testkit.Drive(tb.b).Settle(tb.ctx, protocol.Op{Kind: protocol.OpKill, Lease: c.Lease, Death: protocol.Death{Type: rec.Type, Body: rec.Body, Error: rec.Error, Attempts: 1}, Remember: ttl})
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
	}
	kill(uniqueEnv("plain", time.Minute))
	tb.enqueue(t, uniqueEnv("plain", time.Minute)) // a dead ending is not remembered by default
	d := uniqueEnv("dead", time.Minute)
	d.UniqueDead = true
	kill(d)
	d = uniqueEnv("dead", time.Minute)
	d.UniqueDead = true
	wantDuplicate(t, tb.b.Enqueue(tb.ctx, d), "q", "dead", true)
}

func TestReplace(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("order-1", time.Minute))
	r := env("order-1", 0)
	r.At, r.Replace, r.Payload = epoch.Add(time.Hour), true, []byte(`{"n":2}`)
	tb.enqueue(t, r)
	if !r.ReadyAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("ReadyAt %v, want the new time", r.ReadyAt)
	}
	info, err := tb.b.Job(tb.ctx, "q", "order-1")
	if err != nil || string(info.Envelope.Payload) != `{"n":2}` || !info.ReadyAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("after replace: %+v, %v", info, err)
	}
	tb.clock.Advance(time.Minute)
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("claimed %v at the old ready time", ids(res.Jobs))
	}
	tb.clock.Advance(time.Hour)
	res := tb.claim(t, 10)
	if len(res.Jobs) != 1 || string(res.Jobs[0].Envelope.Payload) != `{"n":2}` {
		t.Fatalf("claimed %+v", res.Jobs)
	}
	// Held by a worker: refused, nothing changed.
	r = env("order-1", 0)
	r.Replace, r.Payload = true, []byte(`{"n":3}`)
	if err := tb.b.Enqueue(tb.ctx, r); !errors.Is(err, broker.ErrInProgress) || !strings.Contains(err.Error(), "order-1") {
		t.Fatalf("replace of a held job: %v, want ErrInProgress naming it", err)
	}
	if body, _ := tb.rdb.HGet(tb.ctx, tb.key("q", "jobs"), "order-1").Result(); !strings.Contains(body, `"n":2`) {
		t.Fatalf("body %s changed", body)
	}
	// No pending job: a plain enqueue.
	r = env("fresh", 0)
	r.Replace = true
	tb.enqueue(t, r)
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	early := env("early", 0)
	early.ExpireAt = epoch.Add(time.Minute)
	drop := env("drop", 0)
	drop.ExpireAt, drop.DropExpired = epoch.Add(time.Minute), true
	later := env("later", 0)
	later.ExpireAt = epoch.Add(time.Hour)
	tb.enqueue(t, early, drop, later)
	// Before the first attempt: the worker was busy until past the expiry.
	tb.clock.Advance(time.Minute)
	res := tb.claim(t, 10)
	if got := strings.Join(ids(res.Jobs), ","); got != "later" {
		t.Fatalf("claimed %q, want only later", got)
	}
	rec, err := deadletter.New(tb.b).Get(tb.ctx, "q", "early")
	if err != nil || rec.Reason != "expired" || rec.Envelope == nil || rec.Attempts != 0 || !strings.Contains(rec.Error, "expired") {
		t.Fatalf("dead record %+v, %v", rec, err)
	}
	if _, err := deadletter.New(tb.b).Get(tb.ctx, "q", "drop"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("dropped job in the dead letters: %v", err)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
	if err != nil || st.ExpiredDropped != 1 || st.Dead != 1 || st.Processing != 1 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	if n, _ := tb.rdb.HLen(tb.ctx, tb.key("q", "jobs")).Result(); n != 1 {
		t.Fatalf("%d bodies left, want the claimed one", n)
	}

	// Between retries: it failed once, and its retry is due after the
	// expiry.
	c := res.Jobs[0]
	e := *c.Envelope
	e.LastError = "provider down"
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, c.Lease, 2*time.Hour, &e); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(2 * time.Hour)
	if res := tb.claim(t, 10); len(res.Jobs) != 0 {
		t.Fatalf("claimed %v after the expiry", ids(res.Jobs))
	}
	rec, err = deadletter.New(tb.b).Get(tb.ctx, "q", "later")
	if err != nil || rec.Reason != broker.ReasonExpired || rec.Attempts != 1 || !strings.Contains(rec.Error, "provider down") {
		t.Fatalf("dead record %+v, %v", rec, err)
	}

	// Redriven by an operator, it runs without its expiry.
	if err := deadletter.New(tb.b).Redrive(tb.ctx, "q", 0, "later"); err != nil {
		t.Fatal(err)
	}
	res = tb.claim(t, 10)
	if len(res.Jobs) != 1 || !res.Jobs[0].Envelope.ExpireAt.IsZero() || string(res.Jobs[0].Envelope.Payload) != `{"n":1}` {
		t.Fatalf("after redrive claimed %+v", res.Jobs)
	}
}

func TestSchedulingBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	past := env("a", time.Hour)
	past.ExpireAt = time.Now().Add(time.Minute)
	neg := uniqueEnv("b", -time.Second)
	noUnique := env("c", 0)
	noUnique.UniqueDead = true
	drop := env("d", 0)
	drop.DropExpired = true
	for name, tc := range map[string]struct {
		e    *job.Envelope
		want string
	}{
		"expiry before ready": {past, "expiry"},
		"negative ttl":        {neg, "negative"},
		"dead without unique": {noUnique, "without Unique"},
		"drop without expiry": {drop, "without an expiry"},
	} {
		err := tb.b.Enqueue(tb.ctx, tc.e, env("ok-"+name, 0))
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", name, err, tc.want)
		}
	}
	if n, _ := tb.rdb.Exists(tb.ctx, tb.key("q", "jobs"), tb.key("q", "scheduled")).Result(); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
	typ := job.New[int]("t", job.Queue("q"))
	for name, opts := range map[string][]job.Option{
		"negative ttl":       {job.Unique(-time.Second)},
		"expire before In":   {job.In(time.Hour), job.ExpireIn(time.Minute)},
		"expire in the past": {job.ExpireAt(time.Now().Add(-time.Second))},
		"zero ExpireIn":      {job.ExpireIn(0)},
		"include dead alone": {job.UniqueIncludeDead()},
		"drop alone":         {job.DropExpired()},
	} {
		if _, err := typ.Enqueue(tb.ctx, tb.b, 1, opts...); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n, _ := tb.rdb.Exists(tb.ctx, tb.key("q", "jobs")).Result(); n != 0 {
		t.Fatal("bad options wrote a job")
	}
}
