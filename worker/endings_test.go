package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

type endArgs struct {
	Mode string `json:"mode"` // "ok", "fail", "block"
}

// endingCase ends the second member of a sealed batch of two in one way.
type endingCase struct {
	name string
	// member returns the options of the member that ends this way.
	opts func(now time.Time) []job.Option
	mode string
	// act ends it, once the batch is sealed.
	act func(t *testing.T, tb *testBundle, queue, id string, started <-chan string)
	// succeeded, dead and gone are the counts the batch must show; total
	// is succeeded + dead + gone.
	succeeded, dead, gone int
	rejected              bool // the member is refused by AddToBatch
}

// TestBatchEndsWhateverEndsAMember ends a member of a sealed batch of two
// (the other succeeds) in each way a job can end, on a plain queue and on a
// 4-shard one (and on the local cluster under DELAYQ_TEST_TOPOLOGY=cluster):
// succeeded, dead, cancelled while scheduled,
// cancelled while running, expired (dead-lettered and dropped), a next
// job whose enqueue failed, a next job that ran, and a member refused as a
// duplicate. Each time the complete callback runs exactly once, the
// success callback only when every member succeeded, and the batch's
// counts match the dead letters of its members.
func TestBatchEndsWhateverEndsAMember(t *testing.T) {
	t.Parallel()
	cancel := func(running bool) func(t *testing.T, tb *testBundle, queue, id string, started <-chan string) {
		return func(t *testing.T, tb *testBundle, queue, id string, started <-chan string) {
			if running {
				for got := range started {
					if got == id {
						break
					}
				}
			}
			c, err := tb.b.Cancel(tb.ctx, queue, id)
			if err != nil || c.Running != running {
				t.Errorf("Cancel(%s) = %+v, %v; want running %v", id, c, err, running)
			}
		}
	}
	cases := []endingCase{
		{name: "succeeded", mode: "ok", succeeded: 2},
		{name: "dead", mode: "fail", succeeded: 1, dead: 1},
		{name: "cancelled scheduled", mode: "ok", opts: func(time.Time) []job.Option { return []job.Option{job.In(time.Hour)} },
			act: cancel(false), succeeded: 1, gone: 1},
		{name: "cancelled running", mode: "block", act: cancel(true), succeeded: 1, dead: 1},
		{name: "expired", mode: "ok", opts: func(now time.Time) []job.Option {
			return []job.Option{job.At(now.Add(-2 * time.Second)), job.ExpireAt(now.Add(-time.Second))}
		}, succeeded: 1, dead: 1},
		{name: "expired and dropped", mode: "ok", opts: func(now time.Time) []job.Option {
			return []job.Option{job.At(now.Add(-2 * time.Second)), job.ExpireAt(now.Add(-time.Second)), job.DropExpired()}
		}, succeeded: 1, gone: 1},
		{name: "next job not enqueued", mode: "ok", opts: func(time.Time) []job.Option {
			next, err := job.New[endArgs]("end.member", job.Queue("broken")).Envelope(endArgs{Mode: "ok"})
			if err != nil {
				panic(err)
			}
			return []job.Option{job.Then(next)}
		}, succeeded: 1, dead: 1},
		{name: "next job ran", mode: "ok", opts: func(time.Time) []job.Option {
			next, err := job.New[endArgs]("end.member", job.Queue("q")).Envelope(endArgs{Mode: "ok"})
			if err != nil {
				panic(err)
			}
			return []job.Option{job.Then(next)}
		}, succeeded: 3},
		{name: "rejected member", mode: "ok", rejected: true, succeeded: 1},
	}
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			queue := "q"
			if err := tb.b.DeclareQueue(tb.ctx, queue, shards); err != nil {
				t.Fatal(err)
			}
			// A next job's enqueue into "broken" fails: its jobs key is of
			// the wrong type.
			if err := tb.rdb.Set(tb.ctx, testkit.Keys(t, tb.b, "broken").Jobs, "not a hash", 0).Err(); err != nil {
				t.Fatal(err)
			}
			started := make(chan string, 16)
			member := job.New[endArgs]("end.member", job.MaxRetries(0), job.Queue(queue))
			member.Handle(tb.reg, func(ctx context.Context, j *job.Job[endArgs]) error {
				switch j.Args.Mode {
				case "fail":
					return retry.Permanent(errors.New("step failed"))
				case "block":
					started <- j.ID
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			})
			var mu sync.Mutex
			runs := map[string]int{}
			cb := job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
				mu.Lock()
				defer mu.Unlock()
				runs[m.ID]++
				return nil
			})
			for _, name := range []string{"end.success", "end.complete"} {
				if err := tb.reg.Table(registry.Key{}).Register(name, registry.Entry[job.Handler, retry.Policy]{Handler: cb, Queue: "cb"}); err != nil {
					t.Fatal(err)
				}
			}
			cfg := tb.config(t)
			cfg.Queues = queues(queue, "cb")
			cfg.Concurrency = 8
			start(t, cfg)
			now := time.Now()
			for _, c := range cases {
				id := "b-" + c.name
				id = idSafe(id)
				if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: id,
					OnSuccess:  &job.Envelope{Type: "end.success", Queue: "cb"},
					OnComplete: &job.Envelope{Type: "end.complete", Queue: "cb"},
				}); err != nil {
					t.Fatal(err)
				}
				ok, err := member.Envelope(endArgs{Mode: "ok"}, job.ID(id+"-ok"))
				if err != nil {
					t.Fatal(err)
				}
				var opts []job.Option
				if c.opts != nil {
					opts = c.opts(now)
				}
				other, err := member.Envelope(endArgs{Mode: c.mode}, append(opts, job.ID(id+"-m"))...)
				if err != nil {
					t.Fatal(err)
				}
				if c.rejected {
					if _, err := member.Enqueue(tb.ctx, tb.b, endArgs{Mode: "ok"}, job.ID(id+"-m"), job.In(time.Hour)); err != nil {
						t.Fatal(err)
					}
				}
				err = tb.b.AddToBatch(tb.ctx, id, ok, other)
				if c.rejected != errors.Is(err, broker.ErrDuplicate) {
					t.Fatalf("%s: AddToBatch: %v", c.name, err)
				}
				if err := tb.b.SealBatch(tb.ctx, id); err != nil {
					t.Fatal(err)
				}
				if c.act != nil {
					c.act(t, tb, queue, id+"-m", started)
				}
			}
			for _, c := range cases {
				id := idSafe("b-" + c.name)
				redistest.WaitFor(t, 30*time.Second, c.name+": complete callback ran", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return runs[(id+":complete")] > 0 && (c.succeeded < 2 || c.dead+c.gone > 0 || runs[(id+":success")] > 0)
				})
			}
			// A repeated callback would be enqueued by the sweep or a
			// second SealBatch: seal every batch again, and let the
			// queue drain.
			for _, c := range cases {
				if err := tb.b.SealBatch(tb.ctx, idSafe("b-"+c.name)); err != nil {
					t.Fatal(err)
				}
			}
			redistest.WaitFor(t, 10*time.Second, "callback queue drained", func() bool {
				st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "cb"))
				return err == nil && st.Scheduled == 0 && st.Processing == 0
			})
			dead := deadByBatch(t, tb, queue)
			for _, c := range cases {
				id := idSafe("b-" + c.name)
				st, err := tb.b.Batch(tb.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				total := c.succeeded + c.dead + c.gone
				if st.Total != total || st.Succeeded != c.succeeded || st.Dead != c.dead || st.Gone != c.gone || st.Pending != 0 || !st.Complete {
					t.Errorf("%s: %+v, want total %d, succeeded %d, dead %d, gone %d", c.name, st, total, c.succeeded, c.dead, c.gone)
				}
				if st.Dead != dead[id] {
					t.Errorf("%s: batch counts %d dead, the dead letters hold %d of its members", c.name, st.Dead, dead[id])
				}
				wantSuccess := 0
				if c.succeeded == total {
					wantSuccess = 1
				}
				mu.Lock()
				if runs[(id+":complete")] != 1 || runs[(id+":success")] != wantSuccess {
					t.Errorf("%s: complete callback ran %d times, success %d, want 1 and %d", c.name, runs[(id+":complete")], runs[(id+":success")], wantSuccess)
				}
				mu.Unlock()
			}
		})
	}
}

// idSafe makes a case name a batch id.
func idSafe(s string) string {
	out := []byte(s)
	for i, c := range out {
		if c == ' ' {
			out[i] = '-'
		}
	}
	return string(out)
}

// deadByBatch counts the dead records of queue by their batch.
func deadByBatch(t *testing.T, tb *testBundle, queue string) map[string]int {
	t.Helper()
	out := map[string]int{}
	var after protocol.DeadCursor
	for {
		page, next, err := protocol.Dead(tb.b).Page(tb.ctx, queue, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if r.Envelope != nil && r.Envelope.Batch != "" {
				out[r.Envelope.Batch]++
			}
		}
		if next.IsZero() {
			return out
		}
		after = next
	}
}

// TestUniqueRemembersACancelledJob: a job of job.Unique with
// job.UniqueIncludeDead that Cancel ends, running or scheduled, is
// remembered like any other ending without success: enqueued again within
// its window, it is refused with ErrDuplicate and does not run again.
func TestUniqueRemembersACancelledJob(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	started := make(chan string, 4)
	var mu sync.Mutex
	runs := map[string]int{}
	typ := job.New[endArgs]("uniq.cancel", job.Queue("q"), job.Unique(time.Hour), job.UniqueIncludeDead())
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[endArgs]) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		started <- j.ID
		<-ctx.Done()
		return ctx.Err()
	})
	cfg := tb.config(t)
	cfg.Queues = queues("q")
	start(t, cfg)

	if _, err := typ.Enqueue(tb.ctx, tb.b, endArgs{Mode: "block"}, job.ID("running")); err != nil {
		t.Fatal(err)
	}
	if got := <-started; got != "running" {
		t.Fatalf("started %q", got)
	}
	if c, err := tb.b.Cancel(tb.ctx, "q", "running"); err != nil || !c.Running {
		t.Fatalf("Cancel = %+v, %v", c, err)
	}
	redistest.WaitFor(t, 10*time.Second, "the cancelled job is dead-lettered", func() bool {
		r, err := deadletter.New(tb.b).Get(tb.ctx, "q", "running")
		return err == nil && r.Reason == broker.ReasonCancelled
	})
	if _, err := typ.Enqueue(tb.ctx, tb.b, endArgs{Mode: "block"}, job.ID("running")); !errors.Is(err, broker.ErrDuplicate) {
		t.Errorf("enqueue again after a cancel while running: %v, want ErrDuplicate", err)
	}

	if _, err := typ.Enqueue(tb.ctx, tb.b, endArgs{Mode: "block"}, job.ID("scheduled"), job.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if c, err := tb.b.Cancel(tb.ctx, "q", "scheduled"); err != nil || c.Running {
		t.Fatalf("Cancel = %+v, %v", c, err)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, endArgs{Mode: "block"}, job.ID("scheduled")); !errors.Is(err, broker.ErrDuplicate) {
		t.Errorf("enqueue again after a cancel while scheduled: %v, want ErrDuplicate", err)
	}
	// Without UniqueIncludeDead only a success is remembered.
	plain := job.New[endArgs]("uniq.plain", job.Queue("q"), job.Unique(time.Hour))
	plain.Handle(tb.reg, func(ctx context.Context, j *job.Job[endArgs]) error { return nil })
	if _, err := plain.Enqueue(tb.ctx, tb.b, endArgs{}, job.ID("plain"), job.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Cancel(tb.ctx, "q", "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Enqueue(tb.ctx, tb.b, endArgs{}, job.ID("plain"), job.In(time.Hour)); err != nil {
		t.Errorf("enqueue again of a cancelled job without UniqueIncludeDead: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["running"] != 1 || runs["scheduled"] != 0 {
		t.Errorf("runs %v, want running once and scheduled never", runs)
	}
}
