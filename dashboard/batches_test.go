package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// runWorker runs a worker of reg on the queues until the test stops it
// with the returned function (also called at cleanup).
func (tb *testBundle) runWorker(t *testing.T, reg *job.Registry, queues ...string) (stop func()) {
	t.Helper()
	qs := make([]worker.Queue, len(queues))
	for i, q := range queues {
		qs[i] = worker.Queue{Name: q}
	}
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	return testkit.StartWorker(t, worker.Options{Broker: tb.b, Registry: reg, Queues: qs, Concurrency: 4, Logger: &logger})
}

type memberArgs struct {
	Fail bool `json:"fail"`
}

// The batches page lists batches newest first with their state, counts and
// callbacks, in pages of 50; the batch page shows one with links to its
// callback jobs; bad or unknown ids get 400 and 404.
func TestBatchPages(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	r := tb.get(t, "/batches")
	wantStatus(t, "empty batches page", r, http.StatusOK)
	mustContain(t, "empty batches page", r.body, "No batches in this namespace.", `aria-current="page">Batches</a>`)

	// Created an hour ago, a minute apart: 50 old open ones, then the three
	// the test looks at (members due at once for a worker on the real clock).
	clk := clock.NewSimulated(time.Now().Add(-time.Hour))
	b, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	for i := range 50 {
		clk.Advance(time.Second)
		if _, err := b.CreateBatch(tb.ctx, broker.BatchSpec{ID: fmt.Sprintf("old-%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	member := job.New[memberArgs]("batch.member", job.MaxRetries(0), job.Queue("work"))
	create := func(id string, spec broker.BatchSpec, seal bool, members ...memberArgs) {
		t.Helper()
		clk.Advance(time.Minute)
		spec.ID = id
		if _, err := b.CreateBatch(tb.ctx, spec); err != nil {
			t.Fatal(err)
		}
		envs := make([]*job.Envelope, len(members))
		for i, m := range members {
			e, err := member.Envelope(m, job.ID(fmt.Sprintf("%s-m%d", id, i)))
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
	// b-ok: both callbacks in queue cb, run by the worker. b-dead: a member
	// dies; its complete callback goes to queue held, which no worker
	// serves, so its job stays to be linked to. b-open: not sealed.
	create("b-ok", broker.BatchSpec{OnSuccess: &job.Envelope{Type: "batch.cb", Queue: "cb"}, OnComplete: &job.Envelope{Type: "batch.cb", Queue: "cb"}},
		true, memberArgs{}, memberArgs{})
	create("b-dead", broker.BatchSpec{OnSuccess: &job.Envelope{Type: "batch.cb", Queue: "cb"}, OnComplete: &job.Envelope{Type: "batch.cb", Queue: "held"}},
		true, memberArgs{}, memberArgs{Fail: true})
	create("b-open", broker.BatchSpec{}, false, memberArgs{})

	reg := job.NewRegistry()
	member.Handle(reg, func(ctx context.Context, j *job.Job[memberArgs]) error {
		if j.Args.Fail {
			return retry.Permanent(errors.New("member failed"))
		}
		return nil
	})
	if err := reg.Table(registry.Key{}).Register("batch.cb", registry.Entry[job.Handler, retry.Policy]{Handler: job.HandlerFunc(func(context.Context, *job.Message) error { return nil }), Queue: "cb"}); err != nil {
		t.Fatal(err)
	}
	stop := tb.runWorker(t, reg, "work", "cb")
	redistest.WaitFor(t, 30*time.Second, "b-ok and b-dead fired their callbacks", func() bool {
		ok, err1 := tb.b.Batch(tb.ctx, "b-ok")
		dead, err2 := tb.b.Batch(tb.ctx, "b-dead")
		open, err3 := tb.b.Batch(tb.ctx, "b-open")
		return err1 == nil && err2 == nil && err3 == nil && ok.SuccessFired && ok.CompleteFired && dead.CompleteFired && open.Pending == 0
	})
	stop()

	r = tb.get(t, "/batches")
	wantStatus(t, "batches page", r, http.StatusOK)
	mustContain(t, "batches page", r.body,
		`<a href="/batches/b-open"><bdi>b-open</bdi></a>`, `<span class="state s-open">open</span>`,
		`<a href="/batches/b-dead"><bdi>b-dead</bdi></a>`,
		`success <span class="cb cb-skipped">skipped</span>, complete <span class="cb cb-fired">fired</span>`,
		`<a href="/batches/b-ok"><bdi>b-ok</bdi></a>`, `<span class="state s-complete">complete</span>`,
		`success <span class="cb cb-fired">fired</span>, complete <span class="cb cb-fired">fired</span>`,
		`<td class="r"><span class="bad">1</span></td>`,
		`rel="next">older →</a>`, "old-49")
	mustNotContain(t, "batches page", r.body, "old-02", "← newest")
	// Newest first: b-open, b-dead, b-ok, then the old ones.
	order := []string{"/batches/b-open", "/batches/b-dead", "/batches/b-ok", "/batches/old-49", "/batches/old-03"}
	for i := 1; i < len(order); i++ {
		if a, b := strings.Index(r.body, order[i-1]), strings.Index(r.body, order[i]); a < 0 || b < 0 || a > b {
			t.Errorf("batches page: %s (at %d) is not listed before %s (at %d)", order[i-1], a, order[i], b)
		}
	}
	next := regexp.MustCompile(`href="/batches\?cursor=([A-Za-z0-9_-]+)" rel="next"`).FindStringSubmatch(r.body)
	if next == nil {
		t.Fatalf("batches page: no link to the next page")
	}
	r = tb.get(t, "/batches?cursor="+next[1])
	wantStatus(t, "second page", r, http.StatusOK)
	mustContain(t, "second page", r.body, "/batches/old-02", "/batches/old-01", "/batches/old-00", `<a href="/batches">← newest</a>`)
	mustNotContain(t, "second page", r.body, "b-ok", "old-03", `rel="next"`)

	r = tb.get(t, "/batches/b-dead")
	wantStatus(t, "batch page", r, http.StatusOK)
	mustContain(t, "batch page", r.body, `Batch <code class="id"><bdi>b-dead</bdi></code> <span class="state s-complete">complete</span>`,
		"<dt>Total</dt><dd>2</dd>", "<dt>Pending</dt><dd>0</dd>", "<dt>Succeeded</dt><dd>1</dd>", `<dt>Dead</dt><dd><span class="bad">1</span> · <a href="/batches/b-dead/dead" id="dead-members">the dead members</a></dd>`,
		"<dt>Sealed</dt><dd>yes", `aria-current="page">Batches</a>`,
		`<td>success</td>`, `href="/queues/cb/job?id=b-dead%3asuccess"`, `<span class="cb cb-skipped">skipped</span>`,
		`<td>complete</td>`, `href="/queues/held/job?id=b-dead%3acomplete"`)
	mustNotContain(t, "batch page", r.body, "kept until complete", `method="post"`)
	// The fired complete callback waits in queue held: its link leads to it.
	r = tb.get(t, "/queues/held/job?id=b-dead%3acomplete")
	wantStatus(t, "complete callback's job page", r, http.StatusOK)
	mustContain(t, "complete callback's job page", r.body, "<bdi>delayq-batch</bdi>", "<code><bdi>b-dead</bdi></code>")

	r = tb.get(t, "/batches/b-open")
	wantStatus(t, "open batch page", r, http.StatusOK)
	mustContain(t, "open batch page", r.body, `<span class="state s-open">open</span>`, "<dt>Sealed</dt><dd>no",
		"<dt>Succeeded</dt><dd>1</dd>", "— (kept until complete and its callbacks fired)", "This batch has no callbacks.")

	for path, status := range map[string]int{
		"/batches/no%20such":  http.StatusBadRequest,
		"/batches/nope-1":     http.StatusNotFound,
		"/batches?cursor=two": http.StatusBadRequest,
		"/batches?cursor=!!":  http.StatusBadRequest,
	} {
		r := tb.get(t, path)
		wantStatus(t, path, r, status)
		mustNotContain(t, path, r.body, "<table")
	}
	mustContain(t, "unknown batch", tb.get(t, "/batches/nope-1").body, "Not found: batch &#34;nope-1&#34;")
	mustContain(t, "overview", tb.get(t, "/").body, `href="/batches"`)
}

// TestBatchDeadMembers: a batch's page links to its members that ended
// dead, which its dead-members page lists from the dead letters of every
// queue, leaving out the other dead jobs; a batch with none says so; a bad
// cursor or batch id is refused.
func TestBatchDeadMembers(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	// Dead jobs of no batch, before and after the batch.
	tb.kill(t, "work", "other.job", `{}`, map[string]string{"lone-1": "lone failure"})
	ctx := tb.ctx
	if _, err := tb.b.CreateBatch(ctx, broker.BatchSpec{ID: "bd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.CreateBatch(ctx, broker.BatchSpec{ID: "clean"}); err != nil {
		t.Fatal(err)
	}
	work := job.New[memberArgs]("batch.member", job.MaxRetries(0), job.Queue("work"))
	mail := job.New[memberArgs]("batch.mail", job.MaxRetries(0), job.Queue("mail"))
	var envs []*job.Envelope
	for i, m := range []struct {
		t    *job.Type[memberArgs]
		fail bool
	}{{work, false}, {work, true}, {mail, false}, {mail, true}, {work, true}} {
		e, err := m.t.Envelope(memberArgs{Fail: m.fail}, job.ID(fmt.Sprintf("bd-m%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := tb.b.AddToBatch(ctx, "bd", envs...); err != nil {
		t.Fatal(err)
	}
	ok, err := work.Envelope(memberArgs{}, job.ID("clean-m0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.b.AddToBatch(ctx, "clean", ok); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bd", "clean"} {
		if err := tb.b.SealBatch(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	reg := job.NewRegistry()
	handle := func(_ context.Context, j *job.Job[memberArgs]) error {
		if j.Args.Fail {
			return retry.Permanent(errors.New("member " + j.ID + " failed"))
		}
		return nil
	}
	work.Handle(reg, handle)
	mail.Handle(reg, handle)
	stop := tb.runWorker(t, reg, "work", "mail")
	redistest.WaitFor(t, 30*time.Second, "both batches complete", func() bool {
		bd, err1 := tb.b.Batch(ctx, "bd")
		clean, err2 := tb.b.Batch(ctx, "clean")
		return err1 == nil && err2 == nil && bd.Complete && clean.Complete
	})
	stop()
	tb.kill(t, "mail", "other.job", `{}`, map[string]string{"lone-2": "another failure"})

	r := tb.get(t, "/batches/bd")
	mustContain(t, "batch page", r.body, `<span class="bad">3</span> · <a href="/batches/bd/dead" id="dead-members">the dead members</a>`)
	r = tb.get(t, "/batches/bd/dead")
	wantStatus(t, "dead members", r, http.StatusOK)
	mustContain(t, "dead members", r.body, "3 of its 5 members are counted dead.",
		`<a href="/dead/work/job?id=bd-m1"><bdi>bd-m1</bdi></a>`, `<a href="/dead/mail/job?id=bd-m3"><bdi>bd-m3</bdi></a>`,
		`<a href="/dead/work/job?id=bd-m4"><bdi>bd-m4</bdi></a>`, "member bd-m4 failed", `href="/batches/bd">← batch`)
	mustNotContain(t, "dead members", r.body, "bd-m0", "bd-m2", "lone-1", "lone-2", `id="older-dead"`)
	if got := strings.Count(r.body, `<td class="id">`); got != 3 {
		t.Fatalf("dead members page lists %d jobs, want 3", got)
	}

	r = tb.get(t, "/batches/clean")
	mustNotContain(t, "clean batch page", r.body, `id="dead-members"`)
	r = tb.get(t, "/batches/clean/dead")
	wantStatus(t, "clean batch's dead members", r, http.StatusOK)
	mustContain(t, "clean batch's dead members", r.body, "No member of this batch is counted dead now", "No dead record of its members.")

	for path, status := range map[string]int{
		"/batches/bd/dead?cursor=nonsense": http.StatusBadRequest,
		"/batches/nope-1/dead":             http.StatusNotFound,
		"/batches/no%20such/dead":          http.StatusBadRequest,
	} {
		wantStatus(t, path, tb.get(t, path), status)
	}
}

// TestBatchPagesShowGone: a batch whose members were cancelled before they
// ran completes with them gone: the batch page and the list show Gone and
// when it completed, and its success callback, which will never fire, as
// skipped.
func TestBatchPagesShowGone(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "b-gone",
		OnSuccess:  &job.Envelope{Type: "batch.cb", Queue: "cb"},
		OnComplete: &job.Envelope{Type: "batch.cb", Queue: "cb"}}); err != nil {
		t.Fatal(err)
	}
	member := job.New[memberArgs]("batch.member", job.Queue("later"))
	var envs []*job.Envelope
	for _, id := range []string{"g-1", "g-2"} {
		e, err := member.Envelope(memberArgs{}, job.ID(id), job.In(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := tb.b.AddToBatch(tb.ctx, "b-gone", envs...); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(tb.ctx, "b-gone"); err != nil {
		t.Fatal(err)
	}
	r := tb.get(t, "/batches/b-gone")
	mustContain(t, "batch page before the cancels", r.body, `<dd id="gone">0</dd>`, `<dd id="completed">—</dd>`)
	for _, id := range []string{"g-1", "g-2"} {
		if _, err := tb.b.Cancel(tb.ctx, "later", id); err != nil {
			t.Fatal(err)
		}
	}
	r = tb.get(t, "/batches/b-gone")
	wantStatus(t, "batch page", r, http.StatusOK)
	mustContain(t, "batch page", r.body, `<dd id="gone">2 (ended without success`, `<span class="state s-complete">complete</span>`,
		`<span class="cb cb-skipped">skipped</span>`, `<span class="cb cb-fired">fired</span>`)
	mustNotContain(t, "batch page", r.body, `<dd id="completed">—</dd>`)
	r = tb.get(t, "/batches")
	mustContain(t, "batches page", r.body, `<th class="r">Gone</th>`, `<td class="r">2</td>`)
}
