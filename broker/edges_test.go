package broker_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/faultproxy"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// lossy is a broker whose client talks to a server of its own through a
// fault proxy, with go-redis's own retries on or off.
type lossy struct {
	ctx   context.Context
	b     *broker.Broker
	rdb   *redis.Client // straight to the server, for checks
	proxy *faultproxy.Proxy
}

func newLossy(t *testing.T, retries bool) *lossy {
	t.Helper()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	opts := &redis.Options{Addr: p.Addr()}
	if !retries {
		opts.MaxRetries = -1
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &lossy{ctx: context.Background(), b: b, rdb: srv.Client(t), proxy: p}
}

// scripts returns a match for the EVALSHA of a script that names key.
func scripts(key string) func([]string) bool { return faultproxy.Command("evalsha", key) }

// A lost reply to an enqueue: go-redis's resend of the call finds its call
// record and succeeds with the first outcome; without client retries, the
// caller learns that the outcome is unknown, with the id, and
// broker.Resend stores the job once. (resend_test.go has the same after
// the job ran and ended, for every kind of call.)
func TestEnqueueReplyLost(t *testing.T) {
	t.Parallel()
	for _, retries := range []bool{true, false} {
		t.Run("retries "+strconv.FormatBool(retries), func(t *testing.T) {
			t.Parallel()
			l := newLossy(t, retries)
			typ := job.New[map[string]int]("t", job.Queue("q"))
			// Make the queue known first, so that the lost reply is the
			// script's.
			if _, err := typ.Enqueue(l.ctx, l.b, map[string]int{"n": 0}); err != nil {
				t.Fatal(err)
			}
			lost := l.proxy.DropReply(scripts(testkit.Key(t, l.b, "q", "jobs")))
			env, err := typ.Enqueue(l.ctx, l.b, map[string]int{"n": 1}, job.In(time.Hour))
			select {
			case <-lost:
			default:
				t.Fatal("no reply was lost")
			}
			if !retries {
				var ce *broker.CallError
				if !errors.Is(err, broker.ErrOutcomeUnknown) || !errors.As(err, &ce) || env == nil || ce.ID != env.ID || !strings.Contains(err.Error(), env.ID) {
					t.Fatalf("err = %v (envelope %v), want a CallError wrapping ErrOutcomeUnknown naming the id", err, env)
				}
				err = broker.Resend(l.ctx, err)
			}
			if err != nil {
				t.Fatalf("enqueue after a lost reply: %v", err)
			}
			if env.ReadyAt.IsZero() {
				t.Fatal("no ready time")
			}
			if n := l.rdb.HLen(l.ctx, testkit.Key(t, l.b, "q", "jobs")).Val(); n != 2 {
				t.Fatalf("%d jobs stored, want 2", n)
			}
			// Another envelope with the id is still a duplicate.
			if _, err := typ.Enqueue(l.ctx, l.b, map[string]int{"n": 2}, job.ID(env.ID)); !errors.Is(err, broker.ErrDuplicate) {
				t.Fatalf("a different job with the id: %v, want ErrDuplicate", err)
			}
		})
	}
}

// A lost reply to a claim: the claim sent again with its id returns the
// same jobs under the same tokens, spends no further attempt, and a new
// claim takes nothing that the first one holds.
func TestClaimReplyLost(t *testing.T) {
	t.Parallel()
	for _, retries := range []bool{true, false} {
		t.Run("retries "+strconv.FormatBool(retries), func(t *testing.T) {
			t.Parallel()
			l := newLossy(t, retries)
			for _, id := range []string{"a", "b"} {
				if err := l.b.Enqueue(l.ctx, &job.Envelope{ID: id, Queue: "q", Type: "t", Payload: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
			}
			p := protocol.For(l.b)
			s := testkit.Shards(t, l.b, "q")[0]
			w := protocol.Caller{ID: "w1", Lease: time.Minute}
			lost := l.proxy.DropReply(scripts(testkit.Key(t, l.b, "q", "seq")))
			res, err := p.Claim(l.ctx, s, w, "7", 10, time.Minute)
			<-lost
			if !retries {
				if err == nil {
					t.Fatal("claim without retries: no error")
				}
				res, err = p.Claim(l.ctx, s, w, "7", 10, time.Minute)
			}
			if err != nil || len(res.Jobs) != 2 {
				t.Fatalf("claim after a lost reply: %d jobs, %v; want both", len(res.Jobs), err)
			}
			tokens := l.rdb.HGetAll(l.ctx, testkit.Key(t, l.b, "q", "leases")).Val()
			for _, c := range res.Jobs {
				if tokens[c.ID] != strconv.FormatInt(c.Token, 10) || c.Attempt != 1 {
					t.Fatalf("job %s: token %d attempt %d; stored token %s", c.ID, c.Token, c.Attempt, tokens[c.ID])
				}
			}
			if again, err := p.Claim(l.ctx, s, w, "8", 10, time.Minute); err != nil || len(again.Jobs) != 0 {
				t.Fatalf("a new claim took %d jobs (%v), want none: they are held", len(again.Jobs), err)
			}
			// The jobs are the caller's: acked with the replayed tokens.
			if err := testkit.Drive(l.b).Ack(l.ctx, res.Jobs[0].Lease, res.Jobs[1].Lease); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A lost reply to a settle call (an ack, a retry, a kill): the call sent
// again with its id reports what the first run recorded, not a lost lease.
func TestSettleReplyLost(t *testing.T) {
	t.Parallel()
	for _, retries := range []bool{true, false} {
		t.Run("retries "+strconv.FormatBool(retries), func(t *testing.T) {
			t.Parallel()
			l := newLossy(t, retries)
			for _, id := range []string{"a", "r", "k"} {
				if err := l.b.Enqueue(l.ctx, &job.Envelope{ID: id, Queue: "q", Type: "t", Payload: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
			}
			p := protocol.For(l.b)
			s := testkit.Shards(t, l.b, "q")[0]
			w := protocol.Caller{ID: "w1", Lease: time.Minute}
			res, err := p.Claim(l.ctx, s, w, "1", 10, time.Minute)
			if err != nil || len(res.Jobs) != 3 {
				t.Fatalf("claim: %d jobs, %v", len(res.Jobs), err)
			}
			byID := map[string]protocol.Claimed{}
			for _, c := range res.Jobs {
				byID[c.ID] = c
			}
			env := *byID["r"].Envelope
			env.LastError = "boom"
			ops := []protocol.Op{
				{Kind: protocol.OpAck, Lease: byID["a"].Lease},
				{Kind: protocol.OpRetry, Lease: byID["r"].Lease, Delay: time.Hour, Env: &env},
				{Kind: protocol.OpKill, Lease: byID["k"].Lease, Death: protocol.Death{Type: "t", Body: byID["k"].Body, Error: "boom", Attempts: 1}},
			}
			lost := l.proxy.DropReply(scripts(testkit.Key(t, l.b, "q", "dead")))
			out, err := p.Settle(l.ctx, s, w, protocol.LaneSettle, "2", ops)
			<-lost
			if !retries {
				if err == nil {
					t.Fatal("settle without retries: no error")
				}
				out, err = p.Settle(l.ctx, s, w, protocol.LaneSettle, "2", ops)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range out {
				if r.Err != nil {
					t.Fatalf("op %d (%c) after a lost reply: %v, want it recorded", i, ops[i].Kind, r.Err)
				}
			}
			if out[1].At.IsZero() || out[2].At.IsZero() {
				t.Fatalf("retry and kill times missing: %+v", out)
			}
			if st, _ := testkit.OneStats(l.b.Stats(l.ctx, "q")); st.Scheduled != 1 || st.Processing != 0 || st.Dead != 1 {
				t.Fatalf("stats %+v, want 1 scheduled, 1 dead", st)
			}
			// A new call with the same ops is fenced: the leases are gone.
			again, err := p.Settle(l.ctx, s, w, protocol.LaneSettle, "3", ops)
			if err != nil || !errors.Is(again[0].Err, broker.ErrLeaseLost) {
				t.Fatalf("a new call with spent leases: %+v, %v; want lease lost", again, err)
			}
		})
	}
}

// wrongType puts a value of another type than want under key.
func wrongType(t *testing.T, ctx context.Context, rdb redis.UniversalClient, key, want string) {
	t.Helper()
	rdb.Del(ctx, key)
	var err error
	if want == "string" {
		err = rdb.HSet(ctx, key, "x", "y").Err()
	} else {
		err = rdb.Set(ctx, key, "garbage", 0).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot returns every key of the namespace with its DUMP, except the
// per-minute history (best effort by design) and key itself.
func snapshot(t *testing.T, ctx context.Context, rdb redis.UniversalClient, ns, except string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range redistest.Keys(t, rdb, ns+":*") {
		if k == except || strings.Contains(k, ":hist:") {
			continue
		}
		out[k] = rdb.Dump(ctx, k).Val()
	}
	return out
}

// A key of the wrong type (written by another program) makes every script
// that uses it fail before it writes anything, with an error that names the
// key: nothing is stranded or hidden, and once the key is repaired the jobs
// go on.
// TestCallRecordOutlivesTheResendWindow: a worker sends a claim or an
// outcome again only within a lease of sending it first, and its record of
// the last call (for the replay) lives twice the lease from its last write,
// so a resend that took up to another lease to reach Redis still finds it:
// an ack applied once is never reported as a lost lease.
func TestCallRecordOutlivesTheResendWindow(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	p := protocol.For(tb.b)
	s := testkit.Shards(t, tb.b, "q")[0]
	w := protocol.Caller{ID: "w", Lease: time.Minute}
	record := strings.TrimSuffix(tb.key("q", "processing"), "processing") + "w:w"
	res, err := p.Claim(tb.ctx, s, w, "1", 10, time.Minute)
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claim: %v, %v", ids(res.Jobs), err)
	}
	if ttl := tb.rdb.PTTL(tb.ctx, record).Val(); ttl <= 110*time.Second {
		t.Fatalf("after the claim the record expires in %v; want twice the lease", ttl)
	}
	if err := tb.rdb.PExpire(tb.ctx, record, time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Settle(tb.ctx, s, w, protocol.LaneSettle, "2", []protocol.Op{{Kind: protocol.OpAck, Lease: res.Jobs[0].Lease}}); err != nil {
		t.Fatal(err)
	}
	if ttl := tb.rdb.PTTL(tb.ctx, record).Val(); ttl <= 110*time.Second {
		t.Fatalf("after the settle the record expires in %v; want twice the lease", ttl)
	}
	out, err := p.Settle(tb.ctx, s, w, protocol.LaneSettle, "2", []protocol.Op{{Kind: protocol.OpAck, Lease: res.Jobs[0].Lease}})
	if err != nil || out[0].Err != nil {
		t.Fatalf("resent ack: %v, %v; want it reported as recorded", out, err)
	}
}

func TestWrongTypedKeyChangesNothing(t *testing.T) {
	t.Parallel()
	type op struct {
		name string
		keys map[string]string // field -> type
		run  func(tb *testBundle, c []protocol.Claimed) error
	}
	settle := func(kind protocol.OpKind) func(tb *testBundle, c []protocol.Claimed) error {
		return func(tb *testBundle, c []protocol.Claimed) error {
			o := protocol.Op{Kind: kind, Lease: c[0].Lease}
			switch kind {
			case protocol.OpRetry:
				o.Env, o.Delay = c[0].Envelope, time.Second
			case protocol.OpKill:
				o.Death = protocol.Death{Type: "t", Body: c[0].Body, Error: "boom", Attempts: 1}
			}
			_, err := protocol.For(tb.b).Settle(tb.ctx, c[0].Shard, protocol.Caller{ID: "w", Lease: time.Minute, KeepTrimmed: 10}, protocol.LaneSettle, "1", []protocol.Op{o})
			return err
		}
	}
	settleKeys := map[string]string{"scheduled": "zset", "processing": "zset", "jobs": "hash", "attempts": "hash",
		"leases": "hash", "dead": "hash", "dead:index": "zset", "w:w": "hash"}
	ops := []op{
		{"enqueue", map[string]string{"scheduled": "zset", "jobs": "hash"}, func(tb *testBundle, _ []protocol.Claimed) error {
			return tb.b.Enqueue(tb.ctx, env("new", 0))
		}},
		{"claim", map[string]string{"scheduled": "zset", "processing": "zset", "jobs": "hash", "attempts": "hash",
			"leases": "hash", "seq": "string", "w:w": "hash", "controls": "hash"}, func(tb *testBundle, _ []protocol.Claimed) error {
			s := testkit.Shards(tb.t, tb.b, "q")[0]
			_, err := protocol.For(tb.b).Claim(tb.ctx, s, protocol.Caller{ID: "w", Lease: time.Minute}, "9", 10, time.Minute)
			return err
		}},
		{"ack", settleKeys, settle(protocol.OpAck)},
		{"retry", settleKeys, settle(protocol.OpRetry)},
		{"kill", merged(settleKeys, map[string]string{"counts": "hash", "dead:trimmed": "list"}), settle(protocol.OpKill)},
		{"release", settleKeys, settle(protocol.OpRelease)},
		{"extend", map[string]string{"processing": "zset", "leases": "hash"}, func(tb *testBundle, c []protocol.Claimed) error {
			return testkit.Drive(tb.b).Extend(tb.ctx, time.Minute, c[0].Lease)
		}},
		{"reap", map[string]string{"processing": "zset", "jobs": "hash", "attempts": "hash", "leases": "hash", "unique": "zset"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := protocol.For(tb.b).Reap(tb.ctx, testkit.Shards(tb.t, tb.b, "q")[0], 10)
			return err
		}},
		{"take trimmed", map[string]string{"dead:trimmed": "list"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := protocol.For(tb.b).TakeTrimmed(tb.ctx, testkit.Shards(tb.t, tb.b, "q")[0], 10)
			return err
		}},
		{"batch sweep", map[string]string{"batched": "hash"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := protocol.For(tb.b).SweepBatches(tb.ctx, testkit.Shards(tb.t, tb.b, "q")[0], 10)
			return err
		}},
		{"cancel", map[string]string{"scheduled": "zset", "processing": "zset", "jobs": "hash", "attempts": "hash"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := tb.b.Cancel(tb.ctx, "q", "waiting")
			return err
		}},
		{"reschedule", map[string]string{"scheduled": "zset", "processing": "zset"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := tb.b.RescheduleAfter(tb.ctx, "q", "waiting", time.Second)
			return err
		}},
		{"redrive", map[string]string{"scheduled": "zset", "jobs": "hash", "attempts": "hash", "dead": "hash", "dead:index": "zset"}, func(tb *testBundle, _ []protocol.Claimed) error {
			return deadletter.New(tb.b).Redrive(tb.ctx, "q", 0, "dead")
		}},
		{"dead delete", map[string]string{"dead": "hash", "dead:index": "zset"}, func(tb *testBundle, _ []protocol.Claimed) error {
			return deadletter.New(tb.b).Delete(tb.ctx, "q", "gone")
		}},
		{"dead trim", map[string]string{"dead": "hash", "dead:index": "zset"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := deadletter.New(tb.b).Trim(tb.ctx, "q")
			return err
		}},
		{"stats", map[string]string{"scheduled": "zset", "processing": "zset", "dead:index": "zset"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q"))
			return err
		}},
		{"job", map[string]string{"scheduled": "zset", "processing": "zset", "jobs": "hash", "attempts": "hash", "dead": "hash", "dead:index": "zset"}, func(tb *testBundle, _ []protocol.Claimed) error {
			_, err := tb.b.Job(tb.ctx, "q", "gone")
			return err
		}},
	}
	for _, o := range ops {
		fields := make([]string, 0, len(o.keys))
		for f := range o.keys {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		for _, field := range fields {
			t.Run(o.name+"/"+field, func(t *testing.T) {
				t.Parallel()
				tb := setup(t)
				// One job held by a worker, one dead, one waiting, one due.
				tb.enqueue(t, env("held", 0), env("dead", 0))
				claimed := tb.claim(t, 2).Jobs
				if len(claimed) != 2 {
					t.Fatalf("claimed %d", len(claimed))
				}
				held := claimed[0]
				if held.ID != "held" {
					held, claimed[1] = claimed[1], claimed[0]
				}
				testkit.Kill(t, tb.b, claimed[1], "boom")
				tb.enqueue(t, env("waiting", time.Hour), env("due", 0))
				var key string
				if k, ok := strings.CutPrefix(field, "w:"); ok {
					key = testkit.Key(t, tb.b, "q", "processing")
					key = strings.TrimSuffix(key, "processing") + "w:" + k
				} else {
					key = tb.key("q", field)
				}
				before := snapshot(t, tb.ctx, tb.rdb, tb.ns, key)
				wrongType(t, tb.ctx, tb.rdb, key, o.keys[field])
				err := o.run(tb, []protocol.Claimed{held})
				if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "nothing was changed") {
					t.Fatalf("%s with %s of the wrong type: err = %v, want one naming the key", o.name, key, err)
				}
				// The worker's calls say it was refused, not lost: a worker
				// backs off from the shard instead of sending it again first.
				if slices.Contains([]string{"claim", "ack", "retry", "kill", "release", "extend", "reap"}, o.name) && !errors.Is(err, protocol.ErrRefused) {
					t.Fatalf("%s with %s of the wrong type: err = %v, want it to wrap protocol.ErrRefused", o.name, key, err)
				}
				if after := snapshot(t, tb.ctx, tb.rdb, tb.ns, key); !mapsEqual(before, after) {
					t.Fatalf("%s changed keys although it failed:\nbefore %v\nafter  %v", o.name, before, after)
				}
				// Repaired, the queue works: the due job is claimed.
				tb.rdb.Del(tb.ctx, key)
				if field == "jobs" || field == "scheduled" {
					return // the repair lost what the key held
				}
				if got := tb.claim(t, 10).Jobs; !slices.ContainsFunc(got, func(c protocol.Claimed) bool { return c.ID == "due" }) {
					t.Fatalf("after the repair, the due job was not claimed: %v", ids(got))
				}
			})
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A processing job whose lease field is missing is held by nobody: the
// reaper reports it corrupt and it goes to the dead letters with its body,
// not deleted.
func TestLeaselessProcessingJobIsDeadLettered(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("x", 0))
	c := tb.claim(t, 1).Jobs[0]
	if err := tb.rdb.HDel(tb.ctx, tb.key("q", "leases"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(time.Hour)
	res, err := testkit.Drive(tb.b).Reap(tb.ctx, "q", 10)
	if err != nil || len(res.Jobs) != 1 || len(res.Orphans) != 0 {
		t.Fatalf("reap = %+v, %v; want the job, no orphan", res, err)
	}
	r := res.Jobs[0]
	if !errors.Is(r.Err, job.ErrCorrupt) || !strings.Contains(r.Err.Error(), "corrupt state") {
		t.Fatalf("reaped job err = %v, want corrupt state", r.Err)
	}
	if _, err := testkit.Drive(tb.b).KillExpired(tb.ctx, r.Lease, &job.DeadRecord{Body: r.Body, Error: r.Err.Error(), Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	rec, err := deadletter.New(tb.b).Get(tb.ctx, "q", "x")
	if err != nil || string(rec.Body) != string(c.Body) || !strings.Contains(rec.Error, "corrupt state") {
		t.Fatalf("dead record %+v, %v; want the body and the corrupt-state error", rec, err)
	}
}

// Headers count against MaxPayloadBytes.
func TestHeadersCountAgainstPayloadCap(t *testing.T) {
	t.Parallel()
	tb := setup(t, func(o *broker.Options) { o.MaxPayloadBytes = 1 << 10 })
	e := env("h", 0)
	e.Headers = map[string]string{"big": strings.Repeat("x", 2<<10)}
	if err := tb.b.Enqueue(tb.ctx, e); !errors.Is(err, broker.ErrPayloadTooLarge) || !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("2 KiB header under a 1 KiB cap: %v, want ErrPayloadTooLarge", err)
	}
	if n := tb.rdb.Exists(tb.ctx, tb.key("q", "jobs")).Val(); n != 0 {
		t.Fatal("the refused job was stored")
	}
}

// merged returns the fields of a and b.
func merged(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}
