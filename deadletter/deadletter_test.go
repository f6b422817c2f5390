package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

var epoch = time.UnixMilli(1_800_000_000_000)

type testBundle struct {
	t     testing.TB
	ctx   context.Context
	b     *broker.Broker
	in    *deadletter.Inspector
	rdb   redis.UniversalClient
	ns    string
	clock *clock.Simulated
}

func setup(t *testing.T, opts ...func(*broker.Options)) *testBundle {
	t.Helper()
	rdb, ns := redistest.New(t)
	clk := clock.NewSimulated(epoch)
	o := broker.Options{Namespace: ns}
	for _, f := range opts {
		f(&o)
	}
	b, err := broker.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(b, clk.Now)
	return &testBundle{t: t, ctx: context.Background(), b: b, in: deadletter.New(b), rdb: rdb, ns: ns, clock: clk}
}

func (tb *testBundle) key(queue, name string) string { return testkit.Key(tb.t, tb.b, queue, name) }

// dead is a job to kill.
type dead struct {
	queue, id, typ, err string
}

// kill enqueues, claims and dead-letters jobs, one millisecond of the
// simulated clock apart when spread is true, else all in one millisecond.
func (tb *testBundle) kill(t *testing.T, spread bool, jobs ...dead) {
	t.Helper()
	for _, d := range jobs {
		e := &job.Envelope{ID: d.id, Queue: d.queue, Type: d.typ, Payload: []byte(`{"id":"` + d.id + `"}`), MaxRetries: 2}
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
		res, err := testkit.Drive(tb.b).Claim(tb.ctx, d.queue, 1, time.Minute)
		if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != d.id {
			t.Fatalf("claim %s: %+v, %v", d.id, res.Jobs, err)
		}
		c := res.Jobs[0]
		if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Type: d.typ, Body: c.Body, Error: d.err, Attempts: 3}); err != nil {
			t.Fatal(err)
		}
		if spread {
			tb.clock.Advance(time.Millisecond)
		}
	}
}

// listAll pages through List and returns "queue/id" of every record, failing
// on a page over the limit.
func (tb *testBundle) listAll(t *testing.T, queue string, opts deadletter.ListOptions, between func(page int)) []string {
	t.Helper()
	var out []string
	for page := 0; ; page++ {
		p, err := tb.in.List(tb.ctx, queue, opts)
		if err != nil {
			t.Fatal(err)
		}
		if opts.Limit > 0 && len(p.Records) > opts.Limit {
			t.Fatalf("page of %d records, limit %d", len(p.Records), opts.Limit)
		}
		for _, r := range p.Records {
			out = append(out, r.Queue+"/"+r.ID)
		}
		if p.Next == "" {
			return out
		}
		opts.Cursor = p.Next
		if between != nil {
			between(page)
		}
	}
}

// population is 90 dead jobs in two queues, three types and two errors;
// groups of them share a millisecond. want returns the expected newest-first
// list for a predicate.
func population(t *testing.T, tb *testBundle) (want func(func(dead) bool) []string) {
	t.Helper()
	types := []string{"email", "sms", "push"}
	var all []dead
	for i := range 90 {
		d := dead{queue: []string{"a", "b"}[i%2], id: fmt.Sprintf("j%02d", i), typ: types[i%3], err: "timeout"}
		if i%5 == 0 {
			d.err = "bad address"
		}
		all = append(all, d)
	}
	// Ten jobs per millisecond.
	for i := 0; i < len(all); i += 10 {
		tb.kill(t, false, all[i:i+10]...)
		tb.clock.Advance(time.Millisecond)
	}
	return func(pred func(dead) bool) []string {
		var sel []dead
		for _, d := range all {
			if pred(d) {
				sel = append(sel, d)
			}
		}
		// Newest first: later groups first; within a millisecond by queue,
		// then id, descending.
		slices.SortStableFunc(sel, func(x, y dead) int {
			gx, gy := slices.Index(all, x)/10, slices.Index(all, y)/10
			if gx != gy {
				return gy - gx
			}
			if c := strings.Compare(y.queue, x.queue); c != 0 {
				return c
			}
			return strings.Compare(y.id, x.id)
		})
		out := make([]string, len(sel))
		for i, d := range sel {
			out[i] = d.queue + "/" + d.id
		}
		return out
	}
}

func TestListFiltersAndPaging(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	want := population(t, tb)
	for _, tc := range []struct {
		name  string
		queue string
		f     deadletter.Filter
		pred  func(dead) bool
	}{
		{"all queues", "", deadletter.Filter{}, func(dead) bool { return true }},
		{"one queue", "a", deadletter.Filter{}, func(d dead) bool { return d.queue == "a" }},
		{"type", "", deadletter.Filter{Type: "sms"}, func(d dead) bool { return d.typ == "sms" }},
		{"type in queue", "b", deadletter.Filter{Type: "push"}, func(d dead) bool { return d.typ == "push" && d.queue == "b" }},
		{"error", "", deadletter.Filter{ErrorContains: "address"}, func(d dead) bool { return d.err == "bad address" }},
		{"died between", "", deadletter.Filter{DiedAfter: epoch.Add(2 * time.Millisecond), DiedBefore: epoch.Add(5 * time.Millisecond)},
			func(d dead) bool { n := 0; fmt.Sscanf(d.id, "j%d", &n); return n >= 20 && n < 50 }},
		{"nothing", "", deadletter.Filter{Type: "fax"}, func(dead) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exp := want(tc.pred)
			for _, limit := range []int{1, 7, 10, 1000} {
				got := tb.listAll(t, tc.queue, deadletter.ListOptions{Filter: tc.f, Limit: limit}, nil)
				if !slices.Equal(got, exp) {
					t.Fatalf("limit %d: got %d records\n%v\nwant %d\n%v", limit, len(got), got, len(exp), exp)
				}
			}
		})
	}
}

func TestListRecordFields(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.kill(t, true, dead{"q", "x", "email", "smtp: 550"})
	p, err := tb.in.List(tb.ctx, "q", deadletter.ListOptions{})
	if err != nil || len(p.Records) != 1 || p.Next != "" {
		t.Fatalf("List = %+v, %v", p, err)
	}
	r := p.Records[0]
	if r.ID != "x" || r.Queue != "q" || r.Type != "email" || r.Error != "smtp: 550" || r.Attempts != 3 ||
		!r.DiedAt.Equal(epoch) || r.Envelope == nil || string(r.Envelope.Payload) != `{"id":"x"}` {
		t.Fatalf("record %+v", r)
	}
	got, err := tb.in.Get(tb.ctx, "q", "x")
	if err != nil || got.Error != r.Error || !got.DiedAt.Equal(r.DiedAt) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := tb.in.Get(tb.ctx, "q", "y"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("Get unknown: %v", err)
	}
}

func TestListWhileJobsDieAndAreRedriven(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var jobs []dead
	for i := range 60 {
		jobs = append(jobs, dead{[]string{"a", "b"}[i%2], fmt.Sprintf("j%02d", i), "t", "e"})
	}
	tb.kill(t, false, jobs[:30]...) // one millisecond
	tb.clock.Advance(time.Millisecond)
	tb.kill(t, true, jobs[30:]...)
	touched := map[string]bool{}
	got := tb.listAll(t, "", deadletter.ListOptions{Limit: 8}, func(page int) {
		switch page {
		case 0:
			// New deaths, newer than everything listed.
			tb.kill(t, true, dead{"a", "new1", "t", "e"}, dead{"b", "new2", "t", "e"})
		case 1:
			// Redrive one record already seen and one not yet seen.
			for _, d := range []dead{jobs[59], jobs[3]} {
				if err := tb.in.Redrive(tb.ctx, d.queue, time.Hour, d.id); err != nil {
					t.Fatal(err)
				}
				touched[d.queue+"/"+d.id] = true
			}
		}
	})
	count := map[string]int{}
	for _, k := range got {
		count[k]++
	}
	for _, d := range jobs {
		k := d.queue + "/" + d.id
		if want := 1; !touched[k] && count[k] != want {
			t.Errorf("%s listed %d times, want once", k, count[k])
		}
	}
	if count["a/new1"]+count["b/new2"] != 0 {
		t.Errorf("records newer than the cursor were listed: %v", got)
	}
	if count["a/j03"] != 0 {
		t.Errorf("a record redriven before its page was listed")
	}
}

// A filtered List reads at most MaxScan records per call: a filter that
// matches little returns partial pages whose cursor continues the scan, and
// following them finds every match once, in order.
func TestListScanBudget(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	// 100 records over two queues, newest first j99 … j00; three of them
	// match the filter: j89, j49 and j09.
	var jobs []dead
	for i := range 100 {
		d := dead{[]string{"a", "b"}[i%2], fmt.Sprintf("j%02d", i), "t", "timeout"}
		if i == 89 || i == 49 || i == 9 {
			d.err = "needle"
		}
		jobs = append(jobs, d)
	}
	tb.kill(t, true, jobs...)
	f := deadletter.Filter{ErrorContains: "needle"}

	type step struct {
		ids     []string
		partial bool
		scanned int
	}
	var got []step
	opts := deadletter.ListOptions{Filter: f, MaxScan: 30}
	for range 10 {
		p, err := tb.in.List(tb.ctx, "", opts)
		if err != nil {
			t.Fatal(err)
		}
		st := step{partial: p.Partial, scanned: p.Scanned}
		for _, r := range p.Records {
			st.ids = append(st.ids, r.ID)
		}
		got = append(got, st)
		if p.Partial && p.Next == "" {
			t.Fatal("a partial page without a cursor")
		}
		if p.Next == "" {
			break
		}
		opts.Cursor = p.Next
	}
	// 30 records a call: j99…j70, j69…j40, j39…j10, then the last ten.
	want := []step{{[]string{"j89"}, true, 30}, {[]string{"j49"}, true, 30}, {nil, true, 30}, {[]string{"j09"}, false, 10}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages %v, want %v", got, want)
	}

	// Without a bound one call finds all three; the default bound is far
	// above 100 records.
	for _, max := range []int{-1, 0} {
		p, err := tb.in.List(tb.ctx, "", deadletter.ListOptions{Filter: f, MaxScan: max})
		if err != nil || len(p.Records) != 3 || p.Partial || p.Next != "" || p.Scanned != 100 {
			t.Fatalf("MaxScan %d: %d records, partial %v, next %q, scanned %d, %v", max, len(p.Records), p.Partial, p.Next, p.Scanned, err)
		}
	}
	// A budget that ends exactly at the last record gives a final page.
	p, err := tb.in.List(tb.ctx, "b", deadletter.ListOptions{Filter: f, MaxScan: 50}) // the odd ones
	if err != nil || len(p.Records) != 3 || p.Partial || p.Next != "" || p.Scanned != 50 {
		t.Fatalf("budget of the whole queue: %+v, %v", p, err)
	}
	// Without a filter the budget does not apply: a page reads its own.
	p, err = tb.in.List(tb.ctx, "", deadletter.ListOptions{Limit: 40, MaxScan: 5})
	if err != nil || len(p.Records) != 40 || p.Partial || p.Next == "" || p.Scanned != 40 {
		t.Fatalf("unfiltered page with a small budget: %d records, partial %v, scanned %d, %v", len(p.Records), p.Partial, p.Scanned, err)
	}
	// A full page before the budget runs out is an ordinary page.
	p, err = tb.in.List(tb.ctx, "", deadletter.ListOptions{Filter: f, Limit: 1, MaxScan: 30})
	if err != nil || len(p.Records) != 1 || p.Partial || p.Next == "" || p.Scanned != 11 {
		t.Fatalf("full page: %+v, %v", p, err)
	}
}

func TestListBadOptions(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, tc := range []struct {
		queue string
		opts  deadletter.ListOptions
		want  error
	}{
		{"q", deadletter.ListOptions{Limit: -1}, job.ErrInvalid},
		{"q", deadletter.ListOptions{Limit: protocol.DeadPageMax + 1}, job.ErrInvalid},
		{"q", deadletter.ListOptions{Cursor: "!!"}, broker.ErrBadCursor},
		{"q", deadletter.ListOptions{Cursor: "bm90LWEtY3Vyc29y"}, broker.ErrBadCursor}, // "not-a-cursor"
		{"q{", deadletter.ListOptions{}, job.ErrInvalid},
	} {
		if _, err := tb.in.List(tb.ctx, tc.queue, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("List(%q, %+v) = %v, want %v", tc.queue, tc.opts, err, tc.want)
		}
	}
}

func TestRedriveOne(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.kill(t, true, dead{"q", "a", "t", "boom"}, dead{"q", "b", "t", "boom"}, dead{"q", "c", "t", "boom"})
	if err := tb.in.Redrive(tb.ctx, "q", 5*time.Second, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.in.Get(tb.ctx, "q", "a"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("redriven record still dead: %v", err)
	}
	j, err := tb.b.Job(tb.ctx, "q", "a")
	if err != nil || j.State != job.StateScheduled || j.Attempts != 0 || !j.ReadyAt.Equal(tb.clock.Now().Add(5*time.Second)) ||
		string(j.Envelope.Payload) != `{"id":"a"}` {
		t.Fatalf("redriven job %+v, %v", j, err)
	}
	tb.clock.Advance(5 * time.Second)
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", 10, time.Minute)
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].Attempt != 1 {
		t.Fatalf("claim after redrive: %+v, %v (want attempt 1: attempts reset)", res.Jobs, err)
	}

	// No longer dead: not found, nothing changes.
	if err := tb.in.Redrive(tb.ctx, "q", 0, "a"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("second redrive: %v", err)
	}
	if j, err := tb.b.Job(tb.ctx, "q", "a"); err != nil || j.State != job.StateProcessing {
		t.Fatalf("job after a refused redrive: %+v, %v", j, err)
	}

	// Pending again under the same id: duplicate, the record is kept.
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "b", Queue: "q", Type: "t", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := tb.in.Redrive(tb.ctx, "q", 0, "b"); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("redrive of a pending id: %v", err)
	}
	if r, err := tb.in.Get(tb.ctx, "q", "b"); err != nil || r.Error != "boom" {
		t.Fatalf("dead record of a pending id: %+v, %v", r, err)
	}
	if j, err := tb.b.Job(tb.ctx, "q", "b"); err != nil || !j.ReadyAt.Equal(tb.clock.Now().Add(time.Hour)) {
		t.Fatalf("pending job changed: %+v, %v", j, err)
	}

	// Several ids: a batch error aligned with them.
	err = tb.in.Redrive(tb.ctx, "q", 0, "zz", "c", "b")
	var be *job.BatchError
	if !errors.As(err, &be) || !errors.Is(be.Errs[0], broker.ErrNotFound) || be.Errs[1] != nil || !errors.Is(be.Errs[2], broker.ErrDuplicate) {
		t.Fatalf("batch redrive: %v", err)
	}
	if err := tb.in.Redrive(tb.ctx, "q", -time.Second, "b"); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("negative delay: %v", err)
	}
}

func TestRedriveAllInBatches(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var jobs []dead
	for i := range 300 {
		jobs = append(jobs, dead{[]string{"a", "b"}[i%2], fmt.Sprintf("j%03d", i), []string{"x", "y", "z"}[i%3], "e"})
	}
	tb.kill(t, true, jobs...)
	// One x job is pending again under its id: it fails alone and stays dead.
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "j000", Queue: "a", Type: "x", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var progress []deadletter.BulkResult
	res, err := tb.in.RedriveAll(tb.ctx, "", deadletter.Filter{Type: "x"}, deadletter.BulkOptions{
		Batch: 30, Delay: time.Minute,
		Progress: func(r deadletter.BulkResult) { progress = append(progress, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != 99 || res.Failed != 1 || !errors.Is(res.Err, broker.ErrDuplicate) {
		t.Fatalf("RedriveAll = %+v", res)
	}
	// 50 x jobs per queue: batches of 30 then 20 in each.
	if len(progress) != 4 || progress[len(progress)-1].Done+progress[len(progress)-1].Failed != 100 {
		t.Fatalf("progress %+v", progress)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i].Done+progress[i].Failed <= progress[i-1].Done+progress[i-1].Failed {
			t.Fatalf("progress not increasing: %+v", progress)
		}
	}
	for _, q := range []string{"a", "b"} {
		s, err := testkit.OneStats(tb.b.Stats(tb.ctx, q))
		if err != nil {
			t.Fatal(err)
		}
		wantSched := int64(50)
		wantDead := int64(100)
		if q == "a" {
			wantDead++ // j000 stayed
		}
		if s.Scheduled != wantSched || s.Dead != wantDead {
			t.Fatalf("queue %s after RedriveAll: %+v", q, s)
		}
	}
	if n, err := tb.in.Count(tb.ctx, "", deadletter.Filter{Type: "x"}); err != nil || n != 1 {
		t.Fatalf("x jobs left dead: %d, %v", n, err)
	}
	if _, err := tb.in.RedriveAll(tb.ctx, "", deadletter.Filter{}, deadletter.BulkOptions{Batch: 5000}); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("batch over the cap: %v", err)
	}
}

func TestDeleteCountPurge(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var jobs []dead
	for i := range 40 {
		jobs = append(jobs, dead{[]string{"a", "b"}[i%2], fmt.Sprintf("j%02d", i), "t", []string{"timeout", "refused"}[i%4/2]})
	}
	tb.kill(t, true, jobs...)
	if n, err := tb.in.Count(tb.ctx, "", deadletter.Filter{}); err != nil || n != 40 {
		t.Fatalf("Count all = %d, %v", n, err)
	}
	if n, err := tb.in.Count(tb.ctx, "a", deadletter.Filter{ErrorContains: "refused"}); err != nil || n != 10 {
		t.Fatalf("Count refused in a = %d, %v", n, err)
	}
	if err := tb.in.Delete(tb.ctx, "a", "j00"); err != nil {
		t.Fatal(err)
	}
	if err := tb.in.Delete(tb.ctx, "a", "j00"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	res, err := tb.in.DeleteAll(tb.ctx, "", deadletter.Filter{ErrorContains: "refused"}, deadletter.BulkOptions{Batch: 3})
	if err != nil || res.Done != 20 || res.Failed != 0 {
		t.Fatalf("DeleteAll = %+v, %v", res, err)
	}
	res, err = tb.in.DeleteAll(tb.ctx, "b", deadletter.Filter{}, deadletter.BulkOptions{})
	if err != nil || res.Done != 10 || res.Failed != 0 {
		t.Fatalf("DeleteAll b, no filter = %+v, %v", res, err)
	}
	if res, err := tb.in.DeleteAll(tb.ctx, "", deadletter.Filter{}, deadletter.BulkOptions{}); err != nil || res.Done != 9 {
		t.Fatalf("DeleteAll every queue, no filter = %+v, %v", res, err)
	}
	for _, q := range []string{"a", "b"} {
		if n, _ := tb.rdb.Exists(tb.ctx, tb.key(q, "dead"), tb.key(q, "dead:index")).Result(); n != 0 {
			t.Fatalf("queue %s: dead keys left after purge", q)
		}
	}
}

func TestRetentionCap(t *testing.T) {
	t.Parallel()
	tb := setup(t, func(o *broker.Options) { o.DeadCap = 100 })
	var jobs []dead
	for i := range 150 {
		jobs = append(jobs, dead{"q", fmt.Sprintf("j%03d", i), "t", "e"})
	}
	tb.kill(t, true, jobs...)
	got := tb.listAll(t, "q", deadletter.ListOptions{Limit: 1000}, nil)
	if len(got) != 100 || got[0] != "q/j149" || got[99] != "q/j050" {
		t.Fatalf("kept %d records, %v … %v; want the newest 100, j149 … j050", len(got), got[:1], got[len(got)-1:])
	}
	if n, _ := tb.rdb.HLen(tb.ctx, tb.key("q", "dead")).Result(); n != 100 {
		t.Fatalf("dead hash holds %d records, want 100", n)
	}
}

func TestRetentionMaxAge(t *testing.T) {
	t.Parallel()
	tb := setup(t, func(o *broker.Options) { o.DeadMaxAge = time.Hour })
	tb.kill(t, true, dead{"q", "old1", "t", "e"}, dead{"q", "old2", "t", "e"})
	tb.kill(t, true, dead{"r", "old3", "t", "e"})
	tb.clock.Advance(40 * time.Minute)
	tb.kill(t, true, dead{"q", "mid", "t", "e"})
	tb.clock.Advance(30 * time.Minute) // old* are 70 minutes old, mid 30

	// A death in q trims q at once.
	tb.kill(t, true, dead{"q", "new", "t", "e"})
	if got := tb.listAll(t, "q", deadletter.ListOptions{}, nil); !slices.Equal(got, []string{"q/new", "q/mid"}) {
		t.Fatalf("q after a death: %v", got)
	}
	// Nothing died in r: an explicit Trim drops its old record.
	if n, err := tb.in.Count(tb.ctx, "r", deadletter.Filter{}); err != nil || n != 1 {
		t.Fatalf("r before Trim: %d, %v", n, err)
	}
	n, err := tb.in.Trim(tb.ctx, "")
	if err != nil || n != 1 {
		t.Fatalf("Trim = %d, %v", n, err)
	}
	if n, _ := tb.rdb.Exists(tb.ctx, tb.key("r", "dead"), tb.key("r", "dead:index")).Result(); n != 0 {
		t.Fatal("r's old record survived Trim")
	}
	tb.clock.Advance(31 * time.Minute)
	if n, err := tb.in.Trim(tb.ctx, "q"); err != nil || n != 1 {
		t.Fatalf("Trim q = %d, %v; want mid dropped", n, err)
	}
}
