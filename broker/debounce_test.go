package broker_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// notice is the argument of the debounced jobs of these tests.
type notice struct {
	N int `json:"n"`
}

var noticeType = job.New[notice]("notify.digest", job.Queue("q"))

// storedJobs is the number of jobs stored in queue q, over all its shards.
func (tb *testBundle) storedJobs(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, s := range testkit.Shards(t, tb.b, "q") {
		n += tb.rdb.HLen(tb.ctx, s.Keys().Jobs).Val()
	}
	return n
}

// TestDebounceCoalesces: 50 enqueues of one key, each within the window of
// the one before, leave one job, with the last call's arguments, ready one
// window after the last enqueue by the clock the scripts read (the
// simulated one here; TestDebounceUsesServerClock has the server's). The
// job is not claimed before then and is claimed once after. On a queue of
// 4 shards as well: the key's job lives on the shard its id routes to.
func TestDebounceCoalesces(t *testing.T) {
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
			const window = time.Second
			var last *job.Envelope
			for i := 1; i <= 50; i++ {
				e, err := noticeType.Enqueue(tb.ctx, tb.b, notice{N: i}, job.Debounce("user-7", window))
				if err != nil {
					t.Fatalf("enqueue %d: %v", i, err)
				}
				if e.ID != "user-7" || !e.ReadyAt.Equal(tb.clock.Now().Add(window)) {
					t.Fatalf("enqueue %d: id %q, ready %v; want user-7, ready %v", i, e.ID, e.ReadyAt, tb.clock.Now().Add(window))
				}
				last = e
				tb.clock.Advance(10 * time.Millisecond)
			}
			if n := tb.storedJobs(t); n != 1 {
				t.Fatalf("%d jobs stored, want 1", n)
			}
			info, err := tb.b.Job(tb.ctx, "q", "user-7")
			if err != nil || info.State != job.StateScheduled || !info.ReadyAt.Equal(last.ReadyAt) || string(info.Envelope.Payload) != `{"n":50}` {
				t.Fatalf("stored job %+v, %v; want scheduled at %v with n 50", info, err, last.ReadyAt)
			}
			// Due one window after the last enqueue, not before.
			tb.clock.Advance(last.ReadyAt.Add(-time.Millisecond).Sub(tb.clock.Now()))
			if res := tb.claim(t, 10); len(res.Jobs) != 0 {
				t.Fatalf("claimed %v before the window closed", ids(res.Jobs))
			}
			tb.clock.Advance(last.ReadyAt.Sub(tb.clock.Now()))
			res := tb.claim(t, 10)
			if len(res.Jobs) != 1 || res.Jobs[0].ID != "user-7" || string(res.Jobs[0].Envelope.Payload) != `{"n":50}` {
				t.Fatalf("claimed %+v, want user-7 with n 50", res.Jobs)
			}
			if res := tb.claim(t, 10); len(res.Jobs) != 0 {
				t.Fatalf("claimed %v again", ids(res.Jobs))
			}
		})
	}
}

// TestDebounceUsesServerClock: with no test clock (UseClock) the window is counted
// from the Redis server's TIME at the enqueue, as every ready time is.
func TestDebounceUsesServerClock(t *testing.T) {
	t.Parallel()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const window = time.Hour
	var e *job.Envelope
	var before time.Time
	for i := 1; i <= 50; i++ {
		if before, err = rdb.Time(ctx).Result(); err != nil {
			t.Fatal(err)
		}
		if e, err = noticeType.Enqueue(ctx, b, notice{N: i}, job.Debounce("k", window)); err != nil {
			t.Fatal(err)
		}
	}
	after, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The last call's server time lies between the two reads (ready times
	// are rounded up to the ms).
	if e.ReadyAt.Before(before.Add(window)) || e.ReadyAt.After(after.Add(window+time.Millisecond)) {
		t.Fatalf("ready %v, want between %v and %v", e.ReadyAt, before.Add(window), after.Add(window))
	}
	info, err := b.Job(ctx, "q", "k")
	if err != nil || !info.ReadyAt.Equal(e.ReadyAt) || string(info.Envelope.Payload) != `{"n":50}` {
		t.Fatalf("stored %+v, %v", info, err)
	}
	if n := rdb.HLen(ctx, testkit.Key(t, b, "q", "jobs")).Val(); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}
}

// TestDebounceReplyLost: the reply of a debounced enqueue is lost; the
// call sent again (go-redis's own re-send, or broker.Resend) finds its
// call record: it stores no second job and does not move the ready time
// again, even when a later debounced enqueue came in between (the resend
// must not undo it).
func TestDebounceReplyLost(t *testing.T) {
	t.Parallel()
	for _, retries := range []bool{true, false} {
		t.Run("retries "+strconv.FormatBool(retries), func(t *testing.T) {
			t.Parallel()
			l := newLossy(t, retries)
			const window = time.Hour
			if _, err := noticeType.Enqueue(l.ctx, l.b, notice{N: 1}, job.Debounce("k", window)); err != nil {
				t.Fatal(err)
			}
			jobs := testkit.Key(t, l.b, "q", "jobs")
			scheduled := testkit.Key(t, l.b, "q", "scheduled")
			lost := l.proxy.DropReply(scripts(jobs))
			e, err := noticeType.Enqueue(l.ctx, l.b, notice{N: 2}, job.Debounce("k", window))
			select {
			case <-lost:
			default:
				t.Fatal("no reply was lost")
			}
			if !retries {
				var ce *broker.CallError
				if !errors.Is(err, broker.ErrOutcomeUnknown) || !errors.As(err, &ce) || ce.ID != "k" {
					t.Fatalf("err = %v, want a CallError wrapping ErrOutcomeUnknown naming k", err)
				}
				first := l.rdb.ZScore(l.ctx, scheduled, "k").Val()
				// A later enqueue of the key comes in before the resend.
				time.Sleep(2 * time.Millisecond)
				later, err2 := noticeType.Enqueue(l.ctx, l.b, notice{N: 3}, job.Debounce("k", window))
				if err2 != nil {
					t.Fatal(err2)
				}
				if float64(later.ReadyAt.UnixMilli()) <= first {
					t.Fatalf("the later enqueue's ready time %v is not after the lost one's (%v ms)", later.ReadyAt, first)
				}
				err = broker.Resend(l.ctx, err)
				if err != nil {
					t.Fatalf("resend: %v", err)
				}
				// The resend answers the first outcome and changes nothing.
				if float64(e.ReadyAt.UnixMilli()) != first {
					t.Fatalf("resend answered ready %v, the lost call stored %v ms", e.ReadyAt, first)
				}
				info, err := l.b.Job(l.ctx, "q", "k")
				if err != nil || !info.ReadyAt.Equal(later.ReadyAt) || string(info.Envelope.Payload) != `{"n":3}` {
					t.Fatalf("after the resend: %+v, %v; want the later enqueue's job (n 3, ready %v)", info, err, later.ReadyAt)
				}
			} else {
				if err != nil {
					t.Fatalf("enqueue after a lost reply: %v", err)
				}
				info, err := l.b.Job(l.ctx, "q", "k")
				if err != nil || !info.ReadyAt.Equal(e.ReadyAt) || string(info.Envelope.Payload) != `{"n":2}` {
					t.Fatalf("after go-redis's re-send: %+v, %v; want n 2 ready %v", info, err, e.ReadyAt)
				}
			}
			if n := l.rdb.HLen(l.ctx, jobs).Val(); n != 1 {
				t.Fatalf("%d jobs stored, want 1", n)
			}
			if n := l.rdb.ZCard(l.ctx, scheduled).Val(); n != 1 {
				t.Fatalf("%d jobs scheduled, want 1", n)
			}
		})
	}
}

// TestDebounceAfterTheWindow: once the job is due its window is closed. An
// enqueue that finds it due and not claimed gives it the new arguments and
// keeps its ready time (one job, run once, with the newest arguments); one
// that finds it parked by a pause or held by a cap (due too) does the same
// and leaves it there; one that finds it held by a worker stores nothing
// and fails with ErrInProgress naming the id; after the job ended, an
// enqueue stores a new job, ready a window from then.
func TestDebounceAfterTheWindow(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const window = time.Minute
	enq := func(key string, n int) (*job.Envelope, error) {
		return noticeType.Enqueue(tb.ctx, tb.b, notice{N: n}, job.Debounce(key, window))
	}
	first, err := enq("k", 1)
	if err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(window + time.Second) // due, not claimed
	due, err := enq("k", 2)
	if err != nil || !due.ReadyAt.Equal(first.ReadyAt) {
		t.Fatalf("enqueue of a due job: ready %v, %v; want its ready time %v kept", due.ReadyAt, err, first.ReadyAt)
	}
	if n := tb.storedJobs(t); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}
	res := tb.claim(t, 10)
	if len(res.Jobs) != 1 || string(res.Jobs[0].Envelope.Payload) != `{"n":2}` {
		t.Fatalf("claimed %+v, want k with n 2", res.Jobs)
	}
	// Held by a worker: refused, nothing changed.
	before := snapshot(t, tb.ctx, tb.rdb, tb.ns, "")
	_, err = enq("k", 3)
	if !errors.Is(err, broker.ErrInProgress) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("enqueue of a running job: %v, want ErrInProgress naming k", err)
	}
	if after := snapshot(t, tb.ctx, tb.rdb, tb.ns, ""); !mapsEqual(withoutCalls(before), withoutCalls(after)) {
		t.Fatalf("a refused debounce changed the store:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := testkit.Drive(tb.b).Settle(tb.ctx, protocol.Op{Kind: protocol.OpAck, Lease: res.Jobs[0].Lease}); err != nil {
		t.Fatal(err)
	}
	// Ended: a new job, ready a window from now.
	again, err := enq("k", 4)
	if err != nil || !again.ReadyAt.Equal(tb.clock.Now().Add(window)) {
		t.Fatalf("enqueue after the end: %v, %v", again, err)
	}

	// Parked (its type paused) and held (its type at its cap) are due:
	// the arguments change, the ready time and place stay.
	other := job.New[notice]("notify.capped", job.Queue("q"))
	if _, err := enq("parked", 1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"running", "held"} {
		if _, err := other.Enqueue(tb.ctx, tb.b, notice{N: 1}, job.Debounce(id, window)); err != nil {
			t.Fatal(err)
		}
		tb.clock.Advance(time.Millisecond) // "running" is claimed first
	}
	if err := tb.b.Pause(tb.ctx, "q", "notify.digest"); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "notify.capped", 1); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(window)
	if res := tb.claim(t, 10); len(res.Jobs) != 1 || res.Jobs[0].ID != "running" {
		t.Fatalf("claimed %v, want running alone", ids(res.Jobs))
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Parked != 2 || st.Held != 1 {
		t.Fatalf("stats %+v, %v; want k and parked parked, held held", st, err)
	}
	for _, c := range []struct {
		id  string
		typ *job.Type[notice]
	}{{"parked", noticeType}, {"held", other}} {
		was, err := tb.b.Job(tb.ctx, "q", c.id)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.typ.Enqueue(tb.ctx, tb.b, notice{N: 9}, job.Debounce(c.id, window))
		if err != nil || !e.ReadyAt.Equal(was.ReadyAt) {
			t.Fatalf("debounce of %s: ready %v, %v; want %v kept", c.id, e.ReadyAt, err, was.ReadyAt)
		}
		info, err := tb.b.Job(tb.ctx, "q", c.id)
		if err != nil || string(info.Envelope.Payload) != `{"n":9}` {
			t.Fatalf("%s after the debounce: %+v, %v", c.id, info, err)
		}
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Parked != 2 || st.Held != 1 {
		t.Fatalf("stats %+v, %v; want them where they were", st, err)
	}
}

// withoutCalls drops the call records from a snapshot (a refused call
// records its outcome, and changes nothing else).
func withoutCalls(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !strings.Contains(k, ":c:") {
			out[k] = v
		}
	}
	return out
}

// TestDebounceRefusals: bad input and the combinations a debounced job
// cannot have are refused with an error wrapping job.ErrInvalid that names
// what is wrong, and nothing stored changes.
func TestDebounceRefusals(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if _, err := noticeType.Enqueue(tb.ctx, tb.b, notice{N: 1}, job.Debounce("k", time.Minute)); err != nil {
		t.Fatal(err)
	}
	batch, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{})
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, tb.ctx, tb.rdb, tb.ns, "")
	deb := func(e *job.Envelope) *job.Envelope { e.Debounce = time.Minute; return e }
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"zero window", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.Debounce("k", 0))
			return err
		}, "debounce window 0s"},
		{"negative window", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.Debounce("k", -time.Second))
			return err
		}, "debounce window -1s"},
		{"empty key", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.Debounce("", time.Minute))
			return err
		}, "debounce key must not be empty"},
		{"key with a brace", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.Debounce("a{b", time.Minute))
			return err
		}, "debounce key"},
		{"another id", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.ID("x"), job.Debounce("k", time.Minute))
			return err
		}, `ID "x" and Debounce key "k"`},
		{"unique", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.Unique(0), job.Debounce("k", time.Minute))
			return err
		}, "Unique and Debounce"},
		{"replace", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.Replace(), job.Debounce("k", time.Minute))
			return err
		}, "Replace and Debounce"},
		{"in", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.In(time.Hour), job.Debounce("k", time.Minute))
			return err
		}, "In or At and Debounce"},
		{"expiry inside the window", func() error {
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.ExpireIn(time.Second), job.Debounce("k", time.Minute))
			return err
		}, "is not after the ready time"},
		{"many with one key", func() error {
			_, err := noticeType.EnqueueItems(tb.ctx, tb.b, testkit.Items([]notice{{}, {}}, job.Debounce("k", time.Minute)))
			return err
		}, `items 1 and 2 of 2 have the same id "k"`},
		{"envelope without id", func() error {
			e := deb(env("", 0))
			return tb.b.Enqueue(tb.ctx, e)
		}, "has no id"},
		{"envelope with unique", func() error {
			e := deb(env("k", 0))
			e.Unique = true
			return tb.b.Enqueue(tb.ctx, e)
		}, "Unique and Debounce"},
		{"envelope with delay", func() error {
			return tb.b.Enqueue(tb.ctx, deb(env("k", time.Hour)))
		}, "Delay or At and Debounce"},
		{"negative envelope window", func() error {
			e := env("k", 0)
			e.Debounce = -time.Second
			return tb.b.Enqueue(tb.ctx, e)
		}, "debounce window -1s"},
		{"chain next job", func() error {
			next := deb(env("n", 0))
			_, err := noticeType.Enqueue(tb.ctx, tb.b, notice{}, job.Then(next))
			return err
		}, "has Debounce; a next job"},
		{"batch member", func() error {
			return tb.b.AddToBatch(tb.ctx, batch, deb(env("m", 0)))
		}, "is debounced (job.Debounce); a member is a new job"},
		{"batch callback", func() error {
			_, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{OnSuccess: deb(env("cb", 0))})
			return err
		}, "a batch callback cannot be debounced"},
	} {
		err := c.err()
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %q", c.name, err, c.want)
		}
	}
	after := snapshot(t, tb.ctx, tb.rdb, tb.ns, "")
	if !mapsEqual(before, after) {
		t.Fatalf("refused calls changed the store:\nbefore %v\nafter  %v", before, after)
	}
}

// commandsOf runs f, which must succeed, on a server whose command
// counts were reset first, and returns what commandCalls then reads: the
// commands f sent, with those its scripts ran.
func commandsOf(t *testing.T, ctx context.Context, rdb *redis.Client, f func() error) map[string]int {
	t.Helper()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f(); err != nil {
		t.Fatal(err)
	}
	return commandCalls(t, ctx, rdb)
}

// commandCalls is the calls of each command the server counted since its
// statistics were reset, but those of the connection and of this reading.
func commandCalls(t *testing.T, ctx context.Context, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || name == "config|resetstat" || name == "hello" || strings.HasPrefix(name, "client|") {
			continue
		}
		n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		if err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	return out
}

// TestPlainEnqueueCostUnchanged: a single enqueue without debounce (nor
// Unique or Replace) takes the script's one-job path as before: one
// EVALSHA whose commands are ZRANGE, HSETNX, SET (the call record), ZADD
// and TIME (for its delay from now), and no other command reaches the
// server; a debounced one takes the general path, with its call record.
func TestPlainEnqueueCostUnchanged(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain := job.New[notice]("plain", job.Queue("q"))
	if _, err := plain.Enqueue(ctx, b, notice{N: 0}); err != nil { // the queue is known, the script loaded
		t.Fatal(err)
	}
	count := func(enqueue func() error) map[string]int { t.Helper(); return commandsOf(t, ctx, rdb, enqueue) }
	got := count(func() error { _, err := plain.Enqueue(ctx, b, notice{N: 1}); return err })
	want := map[string]int{"evalsha": 1, "zrange": 1, "hsetnx": 1, "set": 1, "zadd": 1, "time": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("a plain enqueue ran %v, want %v", got, want)
	}
	got = count(func() error {
		_, err := noticeType.Enqueue(ctx, b, notice{N: 1}, job.Debounce("k", time.Minute))
		return err
	})
	if got["evalsha"] != 1 || got["get"] != 1 || got["set"] != 1 || got["hset"] != 1 || got["zadd"] != 1 {
		t.Fatalf("a debounced enqueue ran %v, want one EVALSHA with GET, SET, HSET and ZADD", got)
	}
}

// TestDebounceInOneCall: debounced enqueues of one key that go in one
// script call (an Enqueue of several envelopes, or concurrent single
// Enqueues that share a call, see combine.go) each act on what the one
// before left: all answer nil, one job is stored, with the last arguments.
func TestDebounceInOneCall(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	deb := func(n int) *job.Envelope {
		e := env("k", 0)
		e.Debounce, e.Payload = time.Minute, []byte(`{"n":`+strconv.Itoa(n)+`}`)
		return e
	}
	if err := tb.b.Enqueue(tb.ctx, deb(1), deb(2), deb(3)); err != nil {
		t.Fatalf("one call of three: %v", err)
	}
	info, err := tb.b.Job(tb.ctx, "q", "k")
	if err != nil || string(info.Envelope.Payload) != `{"n":3}` || !info.ReadyAt.Equal(tb.clock.Now().Add(time.Minute)) {
		t.Fatalf("stored %+v, %v; want n 3, ready in a minute", info, err)
	}
	// Due: the later ones in a call keep its ready time too.
	tb.clock.Advance(2 * time.Minute)
	if err := tb.b.Enqueue(tb.ctx, deb(4), deb(5)); err != nil {
		t.Fatalf("one call of two, due: %v", err)
	}
	if again, err := tb.b.Job(tb.ctx, "q", "k"); err != nil || string(again.Envelope.Payload) != `{"n":5}` || !again.ReadyAt.Equal(info.ReadyAt) {
		t.Fatalf("stored %+v, %v; want n 5, ready %v kept", again, err, info.ReadyAt)
	}
	// A plain job with the id after a debounced one in a call is a duplicate.
	err = tb.b.Enqueue(tb.ctx, deb(6), env("k", 0))
	var be *job.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], broker.ErrDuplicate) {
		t.Fatalf("debounced then plain: %v, want nil then ErrDuplicate", err)
	}

	// Concurrent producers of one key: every call answers nil.
	tb2 := setup(t)
	const producers = 20
	errs := make(chan error, producers)
	for p := range producers {
		go func() {
			_, err := noticeType.Enqueue(tb2.ctx, tb2.b, notice{N: p}, job.Debounce("k", time.Minute))
			errs <- err
		}()
	}
	for range producers {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent debounced enqueue: %v", err)
		}
	}
	if n := tb2.storedJobs(t); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}
}

// TestDebounceReplacesAJobWaitingForItsRetry: a job that failed and waits
// for its retry is scheduled: a debounced enqueue of its key gives it the
// new arguments and moves its retry to the end of the window, and keeps
// its attempts, so the next claim is its second attempt.
func TestDebounceReplacesAJobWaitingForItsRetry(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if _, err := noticeType.Enqueue(tb.ctx, tb.b, notice{N: 1}, job.Debounce("k", time.Second)); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(time.Second)
	res := tb.claim(t, 1)
	if len(res.Jobs) != 1 {
		t.Fatalf("claimed %v", ids(res.Jobs))
	}
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, res.Jobs[0].Lease, time.Hour, res.Jobs[0].Envelope); err != nil {
		t.Fatal(err)
	}
	e, err := noticeType.Enqueue(tb.ctx, tb.b, notice{N: 2}, job.Debounce("k", time.Minute))
	if err != nil || !e.ReadyAt.Equal(tb.clock.Now().Add(time.Minute)) {
		t.Fatalf("debounce of a job waiting for its retry: %v, ready %v; want ready in a minute", err, e.ReadyAt)
	}
	tb.clock.Advance(time.Minute)
	res = tb.claim(t, 1)
	if len(res.Jobs) != 1 || res.Jobs[0].Attempt != 2 || string(res.Jobs[0].Envelope.Payload) != `{"n":2}` {
		t.Fatalf("claimed %+v, want k's second attempt with n 2", res.Jobs)
	}
}
