package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// TestBatchCallbackDelayAndExpiryCountFromCompletion: a success callback
// declared with job.In(3s) starts at least 3 s after the batch completed
// (both on the server's clock), and a complete callback with an expiry of
// 2 s, on a batch that takes 3 s, runs: its expiry counts from its
// ready time, not from when the batch was created. The batch's keys then
// expire.
func TestBatchCallbackDelayAndExpiryCountFromCompletion(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	member := job.New[endArgs]("cbtime.member", job.Queue("q"))
	member.Handle(tb.reg, func(ctx context.Context, j *job.Job[endArgs]) error { return nil })
	var mu sync.Mutex
	ran := map[string]int{}
	cb := job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		mu.Lock()
		defer mu.Unlock()
		ran[m.ID]++
		return nil
	})
	for _, name := range []string{"cbtime.success", "cbtime.complete"} {
		if err := tb.reg.Table(registry.Key{}).Register(name, registry.Entry[job.Handler, retry.Policy]{Handler: cb, Queue: "cb"}); err != nil {
			t.Fatal(err)
		}
	}
	const id = "timed"
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id,
		OnSuccess:  &job.Envelope{Type: "cbtime.success", Queue: "cb", Delay: 3 * time.Second, Retain: time.Hour},
		OnComplete: &job.Envelope{Type: "cbtime.complete", Queue: "cb", ExpireAt: time.Now().Add(2 * time.Second), Retain: time.Hour},
		Keep:       time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	m, err := member.Envelope(endArgs{}, job.In(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.b.AddToBatch(tb.ctx, id, m); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(tb.ctx, id); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Queues = queues("q", "cb")
	start(t, cfg)
	redistest.WaitFor(t, 20*time.Second, "both callbacks ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran[(id+":success")] == 1 && ran[(id+":complete")] == 1
	})
	st, err := tb.b.Batch(tb.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.CompletedAt.IsZero() || !st.SuccessFired || !st.CompleteFired || st.ExpiresAt.IsZero() {
		t.Fatalf("batch %+v", st)
	}
	// The handler ran; its ack (which records StartedAt) lands next.
	var info *job.JobInfo
	redistest.WaitFor(t, 10*time.Second, "the success callback is acked", func() bool {
		info, err = tb.b.Job(tb.ctx, "cb", (id + ":success"))
		return err == nil && info.State == job.StateSucceeded
	})
	if wait := info.StartedAt.Sub(st.CompletedAt); wait < 3*time.Second {
		t.Errorf("success callback started %s after the batch completed, want at least 3s", wait)
	}
	k := keyspace.Batch(tb.ns, id)
	for _, key := range []string{k.Meta, k.Members} {
		if ttl, err := tb.rdb.PTTL(tb.ctx, key).Result(); err != nil || ttl <= 0 {
			t.Errorf("%s: PTTL %s, %v; want the batch's keys to expire", key, ttl, err)
		}
	}
}

// TestBatchCallbackRefusedWhenDueIsDeadLettered: a callback the broker
// refuses when it comes due (here: over the MaxPayloadBytes of the broker
// that fires it) is dead-lettered with the reason, counts as fired, and
// the batch ends: its keys expire, and sealing again changes nothing.
func TestBatchCallbackRefusedWhenDueIsDeadLettered(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const id = "refused"
	big := []byte(`{"note":"` + strings.Repeat("x", 200) + `"}`)
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id,
		OnComplete: &job.Envelope{Type: "refused.complete", Queue: "cb", Payload: big},
		Keep:       time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	small := testkit.NewBroker(t, tb.rdb, broker.Options{Namespace: tb.ns, MaxPayloadBytes: 100})
	for range 2 {
		if err := small.SealBatch(tb.ctx, id); err != nil {
			t.Fatalf("seal: %v", err)
		}
	}
	rec, err := deadletter.New(tb.b).Get(tb.ctx, "cb", (id + ":complete"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Reason != broker.ReasonCallbackRefused || !strings.Contains(rec.Error, "payload") || !strings.Contains(rec.Error, id) {
		t.Errorf("dead record %+v", rec)
	}
	st, err := tb.b.Batch(tb.ctx, id)
	if err != nil || !st.CompleteFired || st.ExpiresAt.IsZero() {
		t.Fatalf("batch %+v, %v; want it ended", st, err)
	}
	if ttl, err := tb.rdb.PTTL(tb.ctx, keyspace.Batch(tb.ns, id).Meta).Result(); err != nil || ttl <= 0 {
		t.Errorf("PTTL %s, %v; want the batch to expire", ttl, err)
	}
	if s, err := testkit.OneStats(tb.b.Stats(tb.ctx, "cb")); err != nil || s.Dead != 1 || s.Scheduled != 0 {
		t.Errorf("callback queue %+v, %v; want one dead record", s, err)
	}
}

// TestBatchCallbackOptionsRefusedAtCreate: a callback's own uniqueness or
// replace (the callback is unique by its derived id) is refused by
// CreateBatch, naming it, and nothing is stored.
func TestBatchCallbackOptionsRefusedAtCreate(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for name, env := range map[string]*job.Envelope{
		"job.Unique":  {Type: "t", Unique: true},
		"job.Replace": {Type: "t", Replace: true},
	} {
		_, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "opts", OnComplete: env})
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want job.ErrInvalid naming it", name, err)
		}
		if _, err := tb.b.Batch(tb.ctx, "opts"); !errors.Is(err, broker.ErrBatchNotFound) {
			t.Errorf("%s: a batch was stored: %v", name, err)
		}
	}
}

// sealBetween seals a batch once, from inside the client, just before the
// first enqueue call (a script call with a scheduled key) after it is
// armed: between AddToBatch's count and its enqueue.
type sealBetween struct {
	armed atomic.Bool
	seal  func()
}

func (h *sealBetween) check(cmd redis.Cmder) {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasSuffix(s, ":scheduled") && h.armed.CompareAndSwap(true, false) {
			h.seal()
			return
		}
	}
}

func (h *sealBetween) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sealBetween) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check(cmd)
		return next(ctx, cmd)
	}
}

func (h *sealBetween) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.check(c)
		}
		return next(ctx, cmds)
	}
}

// TestAddToBatchRacingSealBatch: a member refused as a duplicate (its id
// pending elsewhere) while SealBatch runs between its count and its
// enqueue is taken back out, and the batch, complete without it, fires
// its callbacks at once: nobody has to seal it again.
func TestAddToBatchRacingSealBatch(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[endArgs]("race.member", job.Queue("q"))
	if _, err := typ.Enqueue(tb.ctx, tb.b, endArgs{}, job.ID("taken"), job.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	const id = "race"
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id,
		OnSuccess:  &job.Envelope{Type: "race.success", Queue: "cb"},
		OnComplete: &job.Envelope{Type: "race.complete", Queue: "cb"},
	}); err != nil {
		t.Fatal(err)
	}
	h := &sealBetween{}
	h.seal = func() {
		if err := tb.b.SealBatch(tb.ctx, id); err != nil {
			t.Errorf("seal: %v", err)
		}
	}
	tb.rdb.AddHook(h)
	m, err := typ.Envelope(endArgs{}, job.ID("taken"), job.In(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	if err := tb.b.AddToBatch(tb.ctx, id, m); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("AddToBatch: %v, want ErrDuplicate", err)
	}
	if h.armed.Load() {
		t.Fatal("the seal did not run between the count and the enqueue")
	}
	st, err := tb.b.Batch(tb.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != 0 || !st.Sealed || !st.Complete || !st.SuccessFired || !st.CompleteFired {
		t.Fatalf("batch %+v; want it complete with no member and both callbacks fired", st)
	}
	for _, cid := range []string{(id + ":success"), (id + ":complete")} {
		if info, err := tb.b.Job(tb.ctx, "cb", cid); err != nil || info.State != job.StateScheduled {
			t.Errorf("callback %s: %+v, %v", cid, info, err)
		}
	}
}
