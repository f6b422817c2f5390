package cli_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// runWorker runs a worker on the queues until the test stops it with the
// returned function (also called at cleanup).
func runWorker(t *testing.T, tb *testBundle, reg *job.Registry, queues ...string) (stop func()) {
	t.Helper()
	qs := make([]worker.Queue, len(queues))
	for i, q := range queues {
		qs[i] = worker.Queue{Name: q}
	}
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	return testkit.StartWorker(t, worker.Options{Broker: tb.b, Registry: reg, Queues: qs, Concurrency: 4, Logger: &logger})
}

// bt0 is when the batches of seedBatches are created: in the past, so
// that their members are due for a worker on the real clock.
var bt0 = time.Date(2025, 6, 1, 3, 4, 5, 0, time.UTC)

type batchArgs struct {
	Fail bool `json:"fail"`
}

// seedBatches creates four batches, runs a worker on queues bq and cb
// until the two complete ones fired their callbacks, and returns the
// callback job ids the worker ran:
//
//	orders-1  bt0      3 members in bq, one dies; success and complete callbacks: complete
//	all-ok-4  bt0+5m   1 member in bq; a success callback: complete
//	import-2  bt0+10m  2 members in later (no worker), sealed; a complete callback
//	open-3    bt0+20m  1 member in later, not sealed, no callbacks
func seedBatches(t *testing.T, tb *testBundle) map[string]bool {
	t.Helper()
	clk := clock.NewSimulated(bt0)
	b, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	member := job.New[batchArgs]("batch.member", job.MaxRetries(0), job.Queue("bq"))
	create := func(id string, at time.Duration, spec broker.BatchSpec, seal bool, members ...batchArgs) {
		t.Helper()
		clk.Advance(bt0.Add(at).Sub(clk.Now()))
		spec.ID = id
		if _, err := b.CreateBatch(tb.ctx, spec); err != nil {
			t.Fatal(err)
		}
		envs := make([]*job.Envelope, len(members))
		for i, m := range members {
			opts := []job.Option{job.ID(id + "-m" + string(rune('1'+i)))}
			if id == "import-2" || id == "open-3" {
				opts = append(opts, job.Queue("later"))
			}
			e, err := member.Envelope(m, opts...)
			if err != nil {
				t.Fatal(err)
			}
			envs[i] = e
		}
		if err := b.AddToBatch(tb.ctx, id, envs...); err != nil {
			t.Fatal(err)
		}
		if seal {
			if err := b.SealBatch(tb.ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	create("orders-1", 0, broker.BatchSpec{
		OnSuccess:  &job.Envelope{Type: "batch.done", Queue: "cb"},
		OnComplete: &job.Envelope{Type: "batch.finished", Queue: "cb"},
	}, true, batchArgs{}, batchArgs{Fail: true}, batchArgs{})
	create("all-ok-4", 5*time.Minute, broker.BatchSpec{OnSuccess: &job.Envelope{Type: "batch.done", Queue: "cb"}}, true, batchArgs{})
	create("import-2", 10*time.Minute, broker.BatchSpec{OnComplete: &job.Envelope{Type: "batch.finished", Queue: "cb"}}, true, batchArgs{}, batchArgs{})
	create("open-3", 20*time.Minute, broker.BatchSpec{}, false, batchArgs{})

	reg := job.NewRegistry()
	member.Handle(reg, func(ctx context.Context, j *job.Job[batchArgs]) error {
		if j.Args.Fail {
			return retry.Permanent(errors.New("step failed"))
		}
		return nil
	})
	ran := make(chan string, 10)
	cb := job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		ran <- m.ID
		return nil
	})
	for _, name := range []string{"batch.done", "batch.finished"} {
		if err := reg.Table(registry.Key{}).Register(name, registry.Entry[job.Handler, retry.Policy]{Handler: cb, Queue: "cb"}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runWorker(t, tb, reg, "bq", "cb")
	got := map[string]bool{}
	redistest.WaitFor(t, 30*time.Second, "the callbacks of orders-1 and all-ok-4 ran", func() bool {
		for {
			select {
			case id := <-ran:
				got[id] = true
			default:
				return len(got) == 2
			}
		}
	})
	stop()
	return got
}

// TestBatchesLsShow: delayq batches ls lists batches newest first with
// their state, counts and callbacks, in pages; batches show prints every
// field, the callbacks' queue/id; bad input is refused.
func TestBatchesLsShow(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if out := tb.ok(t, "batches", "ls"); out != "no batches in namespace "+tb.ns+"\n" {
		t.Errorf("batches ls on an empty namespace: %q", out)
	}
	ran := seedBatches(t, tb)
	if !ran["orders-1:complete"] || !ran["all-ok-4:success"] {
		t.Fatalf("callbacks run: %v, want orders-1:complete and all-ok-4:success", ran)
	}
	now := "--now=" + rfc(bt0.Add(time.Hour))
	golden(t, "batches_ls", tb.ok(t, "batches", "ls", now))
	golden(t, "batches_show_sealed", tb.ok(t, "batches", "show", "import-2", now))

	// Pages of two: the first says where the next starts, the last does not.
	first := tb.ok(t, "batches", "ls", "--limit", "2", now)
	_, cursor, more := strings.Cut(strings.TrimSuffix(first, "\n"), "\nmore: --cursor ")
	if !strings.Contains(first, "open-3") || !strings.Contains(first, "import-2") || strings.Contains(first, "all-ok-4") ||
		!more || cursor == "" || strings.Contains(cursor, "\n") {
		t.Errorf("batches ls --limit 2:\n%s", first)
	}
	second := tb.ok(t, "batches", "ls", "--limit", "2", "--cursor", cursor, now)
	if !strings.Contains(second, "all-ok-4") || !strings.Contains(second, "orders-1") || strings.Contains(second, "open-3") ||
		strings.Contains(second, "more:") {
		t.Errorf("batches ls --limit 2 --cursor %s:\n%s", cursor, second)
	}

	type batchOut struct {
		ID            string `json:"id"`
		CreatedAt     string `json:"created_at"`
		State         string `json:"state"`
		Sealed        bool   `json:"sealed"`
		Total         int    `json:"total"`
		Pending       int    `json:"pending"`
		Succeeded     int    `json:"succeeded"`
		Dead          int    `json:"dead"`
		OnSuccess     string `json:"on_success"`
		OnComplete    string `json:"on_complete"`
		SuccessFired  bool   `json:"success_fired"`
		CompleteFired bool   `json:"complete_fired"`
		ExpiresAt     string `json:"expires_at"`
	}
	var ls struct {
		Batches []batchOut `json:"batches"`
		Next    string     `json:"next"`
	}
	tb.okJSON(t, &ls, "batches", "ls", "--limit", "3")
	var ids []string
	for _, b := range ls.Batches {
		ids = append(ids, b.ID)
	}
	if strings.Join(ids, ",") != "open-3,import-2,all-ok-4" || ls.Next == "" {
		t.Errorf("batches ls --limit 3 --json: ids %v, next %q", ids, ls.Next)
	}
	var last struct {
		Batches []batchOut `json:"batches"`
		Next    string     `json:"next"`
	}
	tb.okJSON(t, &last, "batches", "ls", "--limit", "3", "--cursor", ls.Next)
	if len(last.Batches) != 1 || last.Batches[0].ID != "orders-1" || last.Next != "" {
		t.Errorf("batches ls --limit 3 --cursor --json: %+v; want orders-1 alone and no next", last)
	}

	var show batchOut
	tb.okJSON(t, &show, "batches", "show", "orders-1")
	want := batchOut{ID: "orders-1", CreatedAt: "2025-06-01T03:04:05Z", State: "complete", Sealed: true, Total: 3, Succeeded: 2, Dead: 1,
		OnSuccess: "cb/orders-1:success", OnComplete: "cb/orders-1:complete", CompleteFired: true}
	expires, err := time.Parse(time.RFC3339Nano, show.ExpiresAt)
	if err != nil || time.Until(expires) < admin.DefaultBatchKeep-time.Hour || time.Until(expires) > admin.DefaultBatchKeep {
		t.Errorf("batches show orders-1: expires_at %q, want about %s from now", show.ExpiresAt, admin.DefaultBatchKeep)
	}
	show.ExpiresAt = ""
	if show != want {
		t.Errorf("batches show orders-1 --json:\n got %+v\nwant %+v", show, want)
	}
	out := tb.ok(t, "batches", "show", "orders-1")
	for _, line := range []string{"State:        complete", "Dead:         1", "On success:   cb/orders-1:success (skipped)",
		"On complete:  cb/orders-1:complete (fired)", "Expires:      " + expires.UTC().Format("2006-01-02 15:04:05Z") + " (in "} {
		if !strings.Contains(out, line) {
			t.Errorf("batches show orders-1 lacks %q:\n%s", line, out)
		}
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"batches", "show", "no such"}, 2, "invalid batch id"},
		{[]string{"batches", "show", "nope-9"}, 1, `not found: batch "nope-9"`},
		{[]string{"batches", "show"}, 2, "expected one batch id"},
		{[]string{"batches", "ls", "--limit", "0"}, 2, "invalid --limit 0: want 1..1000"},
		{[]string{"batches", "ls", "--limit", "1001"}, 2, "invalid --limit 1001"},
		{[]string{"batches", "ls", "--cursor", "nope"}, 2, `invalid --cursor "nope"`},
		{[]string{"batches", "ls", "--limit", "x"}, 2, "invalid argument"},
		{[]string{"batches"}, 2, "needs a subcommand: ls, show"},
		{[]string{"batches", "rm"}, 2, `unknown command "rm"`},
	} {
		r := tb.run(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("delayq %q: exit %d, stderr %q, stdout %q; want %d and %q", c.args, r.code, r.stderr, r.stdout, c.code, c.want)
		}
	}
}

// TestBatchesShowGone: a batch whose members were cancelled before they
// ran completes with them counted as gone: batches ls and show (table and
// --json) show GONE and when it completed, the counts add up to the total,
// and the success callback, which will never fire, is "skipped".
func TestBatchesShowGone(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "gone-1",
		OnSuccess:  &job.Envelope{Type: "batch.done", Queue: "cb"},
		OnComplete: &job.Envelope{Type: "batch.finished", Queue: "cb"}}); err != nil {
		t.Fatal(err)
	}
	member := job.New[batchArgs]("batch.member", job.Queue("later"))
	var envs []*job.Envelope
	for _, id := range []string{"g-1", "g-2"} {
		e, err := member.Envelope(batchArgs{}, job.ID(id), job.In(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := tb.b.AddToBatch(tb.ctx, "gone-1", envs...); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(tb.ctx, "gone-1"); err != nil {
		t.Fatal(err)
	}
	var before struct {
		State       string  `json:"state"`
		Gone        int     `json:"gone"`
		CompletedAt *string `json:"completed_at"`
	}
	tb.okJSON(t, &before, "batches", "show", "gone-1")
	if before.State != "sealed" || before.Gone != 0 || before.CompletedAt != nil {
		t.Fatalf("batches show before the cancels: %+v", before)
	}
	for _, id := range []string{"g-1", "g-2"} {
		tb.ok(t, "jobs", "cancel", id, "--queue", "later")
	}
	var show struct {
		State       string `json:"state"`
		Total       int    `json:"total"`
		Pending     int    `json:"pending"`
		Succeeded   int    `json:"succeeded"`
		Dead        int    `json:"dead"`
		Gone        int    `json:"gone"`
		CompletedAt string `json:"completed_at"`
	}
	tb.okJSON(t, &show, "batches", "show", "gone-1")
	completed, err := time.Parse(time.RFC3339Nano, show.CompletedAt)
	if show.State != "complete" || show.Total != 2 || show.Pending != 0 || show.Succeeded != 0 || show.Dead != 0 || show.Gone != 2 ||
		err != nil || time.Since(completed) > time.Minute || time.Since(completed) < -time.Minute {
		t.Errorf("batches show gone-1 --json after both cancels: %+v (completed_at: %v)", show, err)
	}
	out := tb.ok(t, "batches", "show", "gone-1")
	for _, line := range []string{"Gone:         2 (cancelled before they ran", "Completed:    " + completed.UTC().Format("2006-01-02 15:04:05Z"),
		"On success:   cb/gone-1:success (skipped)", "On complete:  cb/gone-1:complete (fired)"} {
		if !strings.Contains(out, line) {
			t.Errorf("batches show gone-1 lacks %q:\n%s", line, out)
		}
	}
	ls := tb.ok(t, "batches", "ls")
	if !strings.Contains(ls, "GONE") || !strings.Contains(ls, "success=skipped,complete=fired") {
		t.Errorf("batches ls:\n%s", ls)
	}
}
