package shardtest

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// readCase is a question that changes nothing, asked of one seeded pair.
type readCase struct {
	name string
	ask  question
}

// runReads asks every case of both sides of one seeded pair, in both clock
// modes, in parallel.
func runReads(t *testing.T, cases []readCase) {
	p := newPair(t, seedOptions{})
	for _, m := range modes {
		for _, c := range cases {
			t.Run(string(m)+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				same(t, p, m, c.ask)
			})
		}
	}
}

// TestBrokerReads asks every reading method of *broker.Broker.
func TestBrokerReads(t *testing.T) {
	t.Parallel()
	runReads(t, brokerReads())
}

func brokerReads() []readCase {
	ctx := context.Background()
	cases := []readCase{
		{"Namespace", func(t *testing.T, e *env) any {
			if e.b.Namespace() != e.ns {
				t.Errorf("%s: Namespace() = %q, want %q", e.name, e.b.Namespace(), e.ns)
			}
			return e.b.Namespace()
		}},
		{"Client", func(t *testing.T, e *env) any {
			if e.b.Client() != e.rdb {
				t.Errorf("%s: Client() is not the client the broker was made with", e.name)
			}
			return fmt.Sprintf("%T", e.b.Client())
		}},
		{"EvictionPolicy", func(t *testing.T, e *env) any {
			p, err := protocol.Admin(e.b).EvictionPolicy(ctx)
			return []any{p, errOut(err)}
		}},
		{"Queues", func(t *testing.T, e *env) any {
			qs, err := protocol.Admin(e.b).Queues(ctx)
			slices.Sort(qs)
			if err == nil && !slices.Equal(qs, []string{mail, orders}) {
				t.Errorf("%s: Queues() = %v", e.name, qs)
			}
			return []any{qs, errOut(err)}
		}},
		{"Stats", func(t *testing.T, e *env) any {
			var out []any
			for _, q := range []string{orders, mail, "never-used", "bad queue!"} {
				st, err := testkit.OneStats(e.b.Stats(ctx, q))
				if q == orders {
					checkStats(t, e, st, err)
				}
				out = append(out, []any{st, errOut(err)})
			}
			return out
		}},
		{"Stats of several", func(t *testing.T, e *env) any {
			st, err := e.b.Stats(ctx, mail, orders, "never-used", orders)
			if err == nil {
				checkStats(t, e, st[1], nil)
				checkStats(t, e, st[3], nil)
			}
			_, errBad := e.b.Stats(ctx, orders, "bad queue!")
			return []any{st, errOut(err), errOut(errBad)}
		}},
		{"Stats of every queue", func(t *testing.T, e *env) any {
			st, err := e.b.Stats(ctx)
			if err == nil && (len(st) != 2 || st[1].Queue != orders) {
				t.Errorf("%s: Stats() = %+v", e.name, st)
			} else if err == nil {
				checkStats(t, e, st[1], nil)
			}
			return []any{st, errOut(err)}
		}},
		{"Job", func(t *testing.T, e *env) any {
			sch, proc, dead := seededIDs()
			want := map[string]job.JobState{}
			for _, id := range sch {
				want[id] = job.StateScheduled
			}
			for _, id := range proc {
				want[id] = job.StateProcessing
			}
			for _, id := range dead {
				if id != redeadID {
					want[id] = job.StateDead
				}
			}
			out := map[string]any{}
			for _, id := range allIDs() {
				j, err := e.b.Job(ctx, orders, id)
				out[id] = jobAnswer(j, err)
				var got job.JobState
				if err == nil {
					got = j.State
				}
				if got != want[id] {
					t.Errorf("%s: Job(%s) state %q (%v), want %q", e.name, id, got, err, want[id])
				}
			}
			for _, q := range []string{mail, "never-used", "bad queue!"} {
				j, err := e.b.Job(ctx, q, "m-p-0")
				out[q+"/m-p-0"] = jobAnswer(j, err)
			}
			j, err := e.b.Job(ctx, orders, "")
			out["empty id"] = jobAnswer(j, err)
			return out
		}},
		{"Shards", func(t *testing.T, e *env) any {
			// The count differs by design; what must hold is the same
			// of every queue: one Shard per declared shard, named for
			// the queue, in its own slot.
			out := map[string]any{}
			for _, q := range []string{orders, mail, "never-used", "bad queue!"} {
				shards, err := protocol.Admin(e.b).Shards(ctx, q)
				want := 1
				if q == orders {
					want = e.shards
				}
				facts := map[string]any{"err": errOut(err)}
				if err == nil {
					ok := len(shards) == want
					slots := map[int]bool{}
					for k, s := range shards {
						name := q
						if len(shards) > 1 {
							name = keyspace.ShardName(q, k, len(shards))
						}
						ok = ok && s.Name == name && keyspace.Logical(s.Name) == q &&
							s.Slot == keyspace.Slot(s.Name) && !slots[s.Slot]
						slots[s.Slot] = true
					}
					if !ok {
						t.Errorf("%s: Shards(%s) = %+v, want %d shards of %s in slots of their own", e.name, q, shards, want, q)
					}
					facts["as declared"] = ok
				}
				out[q] = facts
			}
			return out
		}},
		{"DeadGet", func(t *testing.T, e *env) any {
			out := map[string]any{}
			for _, id := range allIDs() {
				r, err := deadletter.New(e.b).Get(ctx, orders, id)
				out[id] = []any{r, errOut(err)}
			}
			r, err := deadletter.New(e.b).Get(ctx, mail, "m-d-1")
			out["mail/m-d-1"] = []any{r, errOut(err)}
			_, err = deadletter.New(e.b).Get(ctx, "bad queue!", "x")
			out["bad queue"] = errOut(err)
			return out
		}},
		{"History", func(t *testing.T, e *env) any {
			now := e.now(t)
			h, err := protocol.Admin(e.b).History(ctx, []string{orders, mail, "never-used"}, now.Add(-59*time.Minute), now)
			if err == nil {
				var sum admin.Minute
				for _, m := range h[0] {
					sum.Claimed += m.Claimed
					sum.Done += m.Done
					sum.Failed += m.Failed
					sum.Dead += m.Dead
				}
				if want := (admin.Minute{Claimed: nProcessing + nDead + nAcked + nRetried, Done: nAcked, Failed: nRetried, Dead: nDead}); sum != want {
					t.Errorf("%s: History of orders sums to %+v, want %+v", e.name, sum, want)
				}
			}
			// The seed's own minutes, whatever the clock.
			seeded, errSeeded := protocol.Admin(e.b).History(ctx, []string{orders}, e.base.Add(-31*time.Minute), e.base)
			_, errOrder := protocol.Admin(e.b).History(ctx, []string{orders}, e.base, e.base.Add(-time.Minute))
			_, errSpan := protocol.Admin(e.b).History(ctx, []string{orders}, e.base.Add(-25*time.Hour), e.base)
			_, errBad := protocol.Admin(e.b).History(ctx, []string{"bad queue!"}, e.base, e.base)
			return []any{h, errOut(err), seeded, errOut(errSeeded), errOut(errOrder), errOut(errSpan), errOut(errBad)}
		}},
	}
	for _, state := range []job.JobState{job.StateScheduled, job.StateProcessing} {
		method := map[job.JobState]string{job.StateScheduled: "ScheduledPage", job.StateProcessing: "ProcessingPage"}[state]
		page := func(e *env) func(context.Context, string, string, int) (broker.JobPage, error) {
			return pageOf(e.b, state)
		}
		for _, limit := range []int{1, 7, admin.MaxPageLimit} {
			cases = append(cases, readCase{fmt.Sprintf("%s/limit %d", method, limit), func(t *testing.T, e *env) any {
				pages, ids := walkJobs(t, page(e), orders, "", limit)
				sch, proc, _ := seededIDs()
				want := sch
				if state == job.StateProcessing {
					want = proc
				}
				slices.Sort(ids)
				slices.Sort(want)
				if !slices.Equal(ids, want) {
					t.Errorf("%s: the %s pages of orders list %d jobs %v, want the %d seeded", e.name, state, len(ids), ids, len(want))
				}
				return pages
			}})
		}
		cases = append(cases, readCase{method + "/from cursors", func(t *testing.T, e *env) any {
			// Cursors at jobs, between jobs of one time, and at times no
			// job has.
			var out []any
			for _, c := range cursorsFor(e, state) {
				pages, _ := walkJobs(t, page(e), orders, c, 5)
				out = append(out, []any{c, pages})
			}
			pages, _ := walkJobs(t, page(e), mail, "", 2)
			return append(out, pages)
		}})
		cases = append(cases, readCase{method + "/bad input", func(t *testing.T, e *env) any {
			var out []any
			for _, limit := range []int{0, -1, admin.MaxPageLimit + 1} {
				_, err := page(e)(ctx, orders, "", limit)
				out = append(out, errOut(err))
			}
			_, err := page(e)(ctx, "bad queue!", "", 5)
			return append(out, errOut(err))
		}})
	}
	for _, limit := range []int{1, 5, 1000} {
		cases = append(cases, readCase{fmt.Sprintf("DeadPage/limit %d", limit), func(t *testing.T, e *env) any {
			pages, ids := walkDead(t, e.b, orders, protocol.DeadCursor{}, limit)
			_, _, want := seededIDs()
			slices.Sort(ids)
			if !slices.Equal(ids, want) {
				t.Errorf("%s: the dead pages of orders list %d records %v, want the %d seeded", e.name, len(ids), ids, len(want))
			}
			return pages
		}})
	}
	cases = append(cases, readCase{"DeadPage/from cursors", func(t *testing.T, e *env) any {
		var out []any
		at := func(d time.Duration) time.Time { return e.base.Add(-30*time.Minute + d) }
		for _, c := range []protocol.DeadCursor{
			{DiedAt: at(5 * 30 * time.Second), ID: deadID(10)}, // the newer of a pair
			{DiedAt: at(5 * 30 * time.Second), ID: deadID(11)}, // the older of a pair
			{DiedAt: at(5 * 30 * time.Second), ID: "d-10x"},    // between them, no such record
			{DiedAt: at(7*time.Minute + 10*time.Second), ID: "zz"},
			{DiedAt: at(0), ID: "\xff"},
			{DiedAt: e.base.Add(time.Hour), ID: "a"},
		} {
			pages, _ := walkDead(t, e.b, orders, c, 3)
			out = append(out, []any{c, pages})
		}
		pages, _ := walkDead(t, e.b, mail, protocol.DeadCursor{}, 1)
		_, _, errLimit := protocol.Dead(e.b).Page(ctx, orders, protocol.DeadCursor{}, 0)
		_, _, errQueue := protocol.Dead(e.b).Page(ctx, "bad queue!", protocol.DeadCursor{}, 5)
		return append(out, pages, errOut(errLimit), errOut(errQueue))
	}})
	return cases
}

// checkStats fails unless st holds the seed's counts of orders.
func checkStats(t *testing.T, e *env, st job.QueueStats, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: stats of orders: %v", e.name, err)
		return
	}
	got := [4]int64{st.Scheduled, st.Due, st.Processing, st.Dead}
	if want := [4]int64{nScheduled, nDue, nProcessing, nDead}; got != want {
		t.Errorf("%s: stats of orders: scheduled, due, processing, dead = %v, want %v", e.name, got, want)
	}
	if want := e.base.Add(-20 * time.Minute); st.Queue != orders || !st.OldestDue.Round(time.Second).Equal(want) {
		t.Errorf("%s: stats %+v: want queue orders, oldest due %s", e.name, st, want)
	}
}

// cursorsFor are cursors into the scheduled or processing jobs of orders,
// at positions no page returned (cursorAt).
func cursorsFor(e *env, state job.JobState) []string {
	if state == job.StateProcessing {
		// deadlines: base - 7s + lease + k min for p-(2k) and p-(2k+1)
		at := func(k int) time.Time { return e.base.Add(-7*time.Second + lease + time.Duration(k)*time.Minute) }
		return []string{
			cursorAt(at(3), processingID(6)),
			cursorAt(at(3), processingID(7)),
			cursorAt(at(3), "p-06x"),
			cursorAt(at(3).Add(time.Second), "a"),
			cursorAt(at(0).Add(-time.Hour), "z"),
			cursorAt(at(100), "a"),
		}
	}
	// future ready times: base + 1h + k min for s-(4k) ... s-(4k+3)
	at := func(k int) time.Time { return e.base.Add(time.Hour + time.Duration(k)*time.Minute) }
	return []string{
		cursorAt(at(2), futureID(9)),
		cursorAt(at(2), "s-09x"),
		cursorAt(at(2), "s-"),
		cursorAt(at(2).Add(30*time.Second), "a"),
		cursorAt(e.base.Add(-15*time.Minute), dueID(6)),
		cursorAt(e.base.Add(-time.Hour), "a"),
		cursorAt(e.base.Add(5*time.Hour), "a"),
	}
}

// cursorAt is the page cursor of the position (at, id) in the broker's
// format, base64url("<ms>:<id>"), which TestPageCursorFormat (broker) pins.
func cursorAt(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMilli(), 10) + ":" + id))
}

// walkJobs reads pages of limit jobs from the cursor to the end: the pages,
// and the ids they list.
func walkJobs(t *testing.T, page func(context.Context, string, string, int) (broker.JobPage, error), queue string, cur string, limit int) ([]any, []string) {
	t.Helper()
	var (
		pages []any
		ids   []string
	)
	for range 1000 {
		p, err := page(context.Background(), queue, cur, limit)
		if err != nil {
			return append(pages, errOut(err)), ids
		}
		pages = append(pages, map[string]any{"Now": p.Now, "Jobs": jobsOf(p.Jobs, limit), "Next": p.Next})
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		if len(p.Jobs) > limit {
			t.Errorf("a page of limit %d holds %d jobs", limit, len(p.Jobs))
		}
		if p.Next == "" {
			return pages, ids
		}
		cur = p.Next
	}
	t.Fatalf("the pages of %s do not end", queue)
	return nil, nil
}

// fullPage is the page size from which walks answer with whole jobs and
// records; smaller pages, which are many, answer with a line for each.
const fullPage = 50

func jobsOf(js []*job.JobInfo, limit int) any {
	if limit >= fullPage {
		return jobsAnswer(js)
	}
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = jobLine(j)
	}
	return out
}

func recordsOf(rs []*job.DeadRecord, limit int) any {
	if limit >= fullPage {
		return rs
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = deadLine(r)
	}
	return out
}

// walkDead reads dead pages of limit records from the cursor to the end.
func walkDead(t *testing.T, b *broker.Broker, queue string, cur protocol.DeadCursor, limit int) ([]any, []string) {
	t.Helper()
	var (
		pages []any
		ids   []string
	)
	for range 1000 {
		recs, next, err := protocol.Dead(b).Page(context.Background(), queue, cur, limit)
		if err != nil {
			return append(pages, errOut(err)), ids
		}
		pages = append(pages, map[string]any{"Records": recordsOf(recs, limit), "Next": next})
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		if next.IsZero() {
			return pages, ids
		}
		cur = next
	}
	t.Fatalf("the dead pages of %s do not end", queue)
	return nil, nil
}

// enqueueAnswer is what Enqueue gave each envelope and the error.
func enqueueAnswer(envs []*job.Envelope, err error) any {
	out := make([]any, len(envs))
	for i, e := range envs {
		out[i] = map[string]any{"ID": e.ID, "Queue": e.Queue, "ReadyAt": e.ReadyAt, "CreatedAt": e.CreatedAt}
	}
	return map[string]any{"envelopes": out, "err": errOut(err)}
}
