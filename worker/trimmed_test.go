package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// setupWith is setup with broker options.
func setupWith(t *testing.T, opts func(*broker.Options)) *testBundle {
	t.Helper()
	bd := testkit.Setup(t, opts)
	return &testBundle{Bundle: bd, ctx: bd.Ctx, rdb: bd.RDB, ns: bd.NS, b: bd.B, reg: bd.Reg}
}

// trimWarning is the start of the worker's warning of trims by the cap.
const trimWarning = "dead letters are being trimmed"

// hookLog collects what Options.OnDeadTrimmed receives.
type hookLog struct {
	mu   sync.Mutex
	recs []job.TrimmedRecord
}

func (h *hookLog) add(_ context.Context, r *job.TrimmedRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, *r)
}

func (h *hookLog) all() []job.TrimmedRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// A queue whose dead letters are capped at 100 receives 250 deaths: the
// 150 records trimmed by the cap are counted (reason cap), one warning is
// logged (not 150), the hook receives exactly those 150 records, each with
// its whole envelope and final error, and the newest 100 are still in the
// store.
func TestDeadTrimCountedWarnedKept(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, func(o *broker.Options) { o.DeadCap = 100 })
	const deaths = 250
	typ := job.New[payload]("trim.die")
	typ.Handle(tb.reg, func(_ context.Context, j *job.Job[payload]) error {
		return retry.Permanent(fmt.Errorf("boom %d", j.Args.N))
	})
	ids := map[string]int{} // id -> N
	for i := range deaths {
		env, err := typ.Enqueue(tb.ctx, tb.b, payload{N: i})
		if err != nil {
			t.Fatal(err)
		}
		ids[env.ID] = i
	}
	var hook hookLog
	var logs syncBuffer
	l := zerolog.New(&logs).Level(zerolog.WarnLevel)
	cfg := tb.config(t)
	cfg.Logger = &l
	cfg.OnDeadTrimmed = hook.add
	stop := start(t, cfg)
	redistest.WaitFor(t, 30*time.Second, "every job dead and 150 records handed to the hook", func() bool {
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, naming.DefaultQueue))
		return err == nil && st.Dead+st.DeadTrimmedCap == deaths && st.Scheduled == 0 && st.Processing == 0 && len(hook.all()) == deaths-100
	})
	stop()

	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, naming.DefaultQueue))
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 100 || st.DeadTrimmedCap != 150 || st.DeadTrimmedAge != 0 || st.DeadTrimmedUnarchived != 0 {
		t.Fatalf("stats: dead %d, trimmed by cap %d, by age %d, unarchived %d; want 100, 150, 0, 0",
			st.Dead, st.DeadTrimmedCap, st.DeadTrimmedAge, st.DeadTrimmedUnarchived)
	}
	if n := strings.Count(logs.String(), trimWarning); n != 1 {
		t.Fatalf("%d trim warnings, want 1:\n%s", n, logs.String())
	}
	for _, want := range []string{`"queue":"default"`, `"dead_cap":100`, "broker.Options.DeadCap", "redrive"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the warning does not name %s:\n%s", want, logs.String())
		}
	}

	stored, _, err := protocol.Dead(tb.b).Page(tb.ctx, naming.DefaultQueue, protocol.DeadCursor{}, deaths)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 100 {
		t.Fatalf("%d records stored, want 100", len(stored))
	}
	oldestKept := stored[len(stored)-1]
	seen := map[string]bool{}
	for _, r := range stored {
		seen[r.ID] = true
	}
	got := hook.all()
	if len(got) != 150 {
		t.Fatalf("the hook received %d records, want 150", len(got))
	}
	for _, r := range got {
		n, ok := ids[r.ID]
		switch {
		case !ok:
			t.Fatalf("trimmed record of unknown job %q", r.ID)
		case seen[r.ID]:
			t.Fatalf("job %q handed to the hook twice, or trimmed and still stored", r.ID)
		case r.Trim != naming.TrimCap || r.Queue != naming.DefaultQueue || r.Type != "trim.die" || r.Attempts != 1:
			t.Fatalf("record %+v: want trim cap, queue default, type trim.die, 1 attempt", r)
		case r.Envelope == nil || string(r.Envelope.Payload) != fmt.Sprintf(`{"n":%d}`, n) || r.Envelope.ID != r.ID:
			t.Fatalf("record %q: envelope %+v, want the job's own (payload N %d)", r.ID, r.Envelope, n)
		case !strings.Contains(r.Error, fmt.Sprintf("boom %d", n)):
			t.Fatalf("record %q: error %q, want its final error boom %d", r.ID, r.Error, n)
		case r.DiedAt.IsZero() || r.TrimmedAt.Before(r.DiedAt):
			t.Fatalf("record %q: died at %v, trimmed at %v", r.ID, r.DiedAt, r.TrimmedAt)
		case r.DiedAt.After(oldestKept.DiedAt):
			t.Fatalf("record %q died at %v, after the oldest kept one (%v): the cap must trim the oldest", r.ID, r.DiedAt, oldestKept.DiedAt)
		}
		seen[r.ID] = true
	}
	if len(seen) != deaths {
		t.Fatalf("%d distinct jobs stored or handed, want %d", len(seen), deaths)
	}
}

// A hook that blocks never holds up the workers: every job settles while
// it is stuck, the records that do not fit the buffer are counted as
// unarchived, and once it returns it receives exactly the ones kept.
func TestDeadTrimHookBlockedNeverHoldsSettle(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, func(o *broker.Options) { o.DeadCap = 10 })
	const deaths = 200
	typ := job.New[payload]("trim.die")
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { return retry.Permanent(fmt.Errorf("no")) })
	for i := range deaths {
		if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	var handed atomic.Int64
	cfg := tb.config(t)
	cfg.DeadTrimmedBuffer = 5
	cfg.OnDeadTrimmed = func(ctx context.Context, r *job.TrimmedRecord) {
		<-release
		handed.Add(1)
	}
	stop := start(t, cfg)
	defer stop()
	var st job.QueueStats
	redistest.WaitFor(t, 30*time.Second, "every job settled while the hook is blocked", func() bool {
		var err error
		st, err = testkit.OneStats(tb.b.Stats(tb.ctx, naming.DefaultQueue))
		return err == nil && st.Scheduled == 0 && st.Processing == 0 && st.Dead == 10 && st.DeadTrimmedCap == deaths-10
	})
	if handed.Load() != 0 {
		t.Fatalf("the blocked hook returned %d times", handed.Load())
	}
	// At most the buffer (5) waits in Redis, and at most one batch was
	// taken by the blocked goroutine: the rest is counted.
	if st.DeadTrimmedUnarchived < deaths-10-5-16 {
		t.Fatalf("%d records unarchived, want at least %d", st.DeadTrimmedUnarchived, deaths-10-5-16)
	}
	close(release)
	want := st.DeadTrimmedCap - st.DeadTrimmedUnarchived
	redistest.WaitFor(t, 30*time.Second, "the kept records handed", func() bool { return handed.Load() == want })
	stop()
	if got := handed.Load(); got != want {
		t.Fatalf("hook received %d records, want %d (trimmed %d, unarchived %d)", got, want, st.DeadTrimmedCap, st.DeadTrimmedUnarchived)
	}
	if n, err := tb.rdb.LLen(tb.ctx, tb.Keys(naming.DefaultQueue).Trimmed).Result(); err != nil || n != 0 {
		t.Fatalf("trimmed list holds %d (%v), want 0", n, err)
	}
}

// reapLog records what the reaper's Reap calls see.
type reapLog struct {
	protocol.Broker
	mu     sync.Mutex
	passes []protocol.ReapResult
}

func (r *reapLog) Reap(ctx context.Context, s keyspace.Shard, limit int) (protocol.ReapResult, error) {
	res, err := r.Broker.Reap(ctx, s, limit)
	if err == nil {
		r.mu.Lock()
		r.passes = append(r.passes, res)
		r.mu.Unlock()
	}
	return res, err
}

func (r *reapLog) all() []protocol.ReapResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.passes)
}

// An idle queue's uniqueness entries whose window is over are removed by
// the first reaper pass after the window ended (within one reaper
// period), and a live window is never removed early.
func TestIdleQueueUniqueTidiedByReaper(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("trim.unique")
	var ran atomic.Int64
	typ.Handle(tb.reg, func(context.Context, *job.Job[payload]) error { ran.Add(1); return nil })
	// The live window's job first, so that the acks (which trim windows
	// that are over) come before the short windows end: only the reaper
	// can remove them.
	live, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 99}, job.Unique(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	liveID := live.ID
	const short = 5
	for i := range short {
		if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: i}, job.Unique(2*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	log := &reapLog{}
	cfg := tb.wrapped(t, tb.config(t), func(p protocol.Broker) protocol.Broker { log.Broker = p; return log })
	cfg.ReapInterval = 100 * time.Millisecond
	start(t, cfg)
	key := tb.Keys(naming.DefaultQueue).Unique
	redistest.WaitFor(t, 10*time.Second, "every job ran and was acked", func() bool {
		n, err := tb.rdb.ZCard(tb.ctx, key).Result()
		return ran.Load() == short+1 && err == nil && n == short+1
	})
	entries, err := tb.rdb.ZRangeWithScores(tb.ctx, key, 0, -1).Result()
	if err != nil || len(entries) != short+1 {
		t.Fatalf("unique set %v (%v), want %d entries", entries, err, short+1)
	}
	var over time.Time // when the last short window ends
	for _, z := range entries {
		if z.Member != liveID {
			if at := time.UnixMilli(int64(z.Score)); at.After(over) {
				over = at
			}
		}
	}
	redistest.WaitFor(t, 10*time.Second, "a reaper pass after the windows ended", func() bool {
		for _, p := range log.all() {
			if p.Now.After(over) {
				return true
			}
		}
		return false
	})
	tidied := 0
	for _, p := range log.all() {
		if !p.Now.After(over) {
			tidied += p.UniqueTidied
			continue
		}
		// The first pass after the end removed every entry that was over.
		if tidied+p.UniqueTidied != short {
			t.Fatalf("first pass after the windows ended (server time %v, last window %v) brought the tidied entries to %d, want %d",
				p.Now, over, tidied+p.UniqueTidied, short)
		}
		break
	}
	left, err := tb.rdb.ZRange(tb.ctx, key, 0, -1).Result()
	if err != nil || len(left) != 1 || left[0] != liveID {
		t.Fatalf("unique set %v (%v), want only the live window %q", left, err, liveID)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 99}, job.Unique(time.Hour)); err == nil {
		t.Fatal("the live window was forgotten: a duplicate was enqueued")
	}
}
