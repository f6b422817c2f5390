package shardtest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// changeCase is a question that changes jobs, asked of a freshly seeded
// pair on the pinned clock.
type changeCase struct {
	name string
	ask  question
	// noop: the change must leave everything as it was (it is refused,
	// or it asks to confirm first).
	noop bool
}

// runChanges runs each case on its own pair, then reads both pairs back
// whole (snapshot) and compares them too, and checks that the case
// changed something, or nothing when it is a noop.
func runChanges(t *testing.T, cases []changeCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := newPair(t, seedOptions{})
			ref := p.sides[0].in(pinnedClock)
			before := canon(t, ref, snapshot(t, ref))
			same(t, p, pinnedClock, c.ask)
			_, after := compare(t, p, pinnedClock, snapshot)
			switch changed := after[0] != before; {
			case c.noop && changed:
				t.Errorf("%s changed the jobs; it must not", c.name)
			case !c.noop && !changed:
				t.Errorf("%s changed nothing", c.name)
			}
		})
	}
}

// newIDs are the ids changes give new jobs.
func newID(i int) string { return fmt.Sprintf("n-%02d", i) }

// touched are the ids whose Job a snapshot reads: every kind the seed has
// and those the cases change.
var touched = []string{
	dueID(0), dueID(1), dueID(3), futureID(0), futureID(2), futureID(5), futureID(10), futureID(11),
	retriedID(0), redeadID, processingID(0), processingID(3), deadID(0), deadID(1), deadID(8), deadID(9),
	deadID(12), deadID(30), deadID(54), ackedID(1), newID(0), newID(3), newID(7), "m-d-0", "m-s-1", "never-enqueued",
}

// snapshot reads a side whole: queues, stats, every page of every state
// of both queues, the dead letters of every queue, the history, and the
// jobs in touched. Jobs and records are summed up in a line each (the
// readers' tests compare them whole).
func snapshot(t *testing.T, e *env) any {
	t.Helper()
	ctx := context.Background()
	queues, err := protocol.Admin(e.b).Queues(ctx)
	slices.Sort(queues)
	all, errAll := e.b.Stats(ctx)
	out := map[string]any{"queues": []any{queues, errOut(err)}, "stats": []any{all, errOut(errAll)}}
	for _, q := range []string{orders, mail} {
		var sch, proc, dead []string
		for _, j := range walkAll(t, pageOf(e.b, job.StateScheduled), q) {
			sch = append(sch, jobLine(j))
		}
		for _, j := range walkAll(t, pageOf(e.b, job.StateProcessing), q) {
			proc = append(proc, jobLine(j))
		}
		for _, r := range walkAllDead(t, e.b, q) {
			dead = append(dead, deadLine(r))
		}
		out[q] = map[string]any{"scheduled": sch, "processing": proc, "dead": dead}
	}
	var list []string
	for _, p := range walkListAll(t, e.dl) {
		for _, r := range p.Records {
			list = append(list, deadLine(r))
		}
	}
	out["dead letters"] = list
	now := e.now(t)
	h, err := protocol.Admin(e.b).History(ctx, []string{orders, mail}, now.Add(-59*time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	var hist []string
	for i, minutes := range h {
		for _, m := range minutes {
			if m != (admin.Minute{Start: m.Start}) {
				hist = append(hist, fmt.Sprintf("%d %s %+v", i, ms(m.Start), m))
			}
		}
	}
	out["history"] = hist
	jobs := map[string]any{}
	for _, id := range touched {
		q := orders
		if id[0] == 'm' {
			q = mail
		}
		j, err := e.b.Job(ctx, q, id)
		switch {
		case err != nil:
			jobs[id] = errOut(err)
		case j.Dead != nil:
			jobs[id] = jobLine(j) + " | " + deadLine(j.Dead)
		default:
			jobs[id] = jobLine(j)
		}
	}
	out["jobs"] = jobs
	return out
}

// jobLine sums up a job: id, state, times, attempts and envelope.
func jobLine(j *job.JobInfo) string {
	line := fmt.Sprintf("%s %s ready %s lease %s attempts %d", j.ID, j.State, ms(j.ReadyAt), ms(j.LeaseDeadline), j.Attempts)
	if e := j.Envelope; e != nil {
		line += fmt.Sprintf(" %s %s retries %d created %s timeout %s headers %v error %q", e.Type, e.Payload, e.MaxRetries, ms(e.CreatedAt), e.Timeout, e.Headers, e.LastError)
	}
	return line
}

// deadLine sums up a dead record.
func deadLine(r *job.DeadRecord) string {
	return fmt.Sprintf("%s %s %s died %s attempts %d error %q", r.Queue, r.ID, r.Type, ms(r.DiedAt), r.Attempts, r.Error)
}

// ms is t in ms since the epoch, "-" for the zero time.
func ms(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprint(t.UnixMilli())
}

// walkAll returns every job of a page reader, a large page at a time.
// pageOf returns b's Page of state, as a function of the queue, the cursor
// and the limit.
func pageOf(b *broker.Broker, state job.JobState) func(context.Context, string, string, int) (broker.JobPage, error) {
	return func(ctx context.Context, queue, cursor string, limit int) (broker.JobPage, error) {
		return b.Page(ctx, queue, state, cursor, limit)
	}
}

func walkAll(t *testing.T, page func(context.Context, string, string, int) (broker.JobPage, error), queue string) []*job.JobInfo {
	t.Helper()
	var out []*job.JobInfo
	var cur string
	for range 100 {
		p, err := page(context.Background(), queue, cur, admin.MaxPageLimit)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Jobs...)
		if p.Next == "" {
			return out
		}
		cur = p.Next
	}
	t.Fatalf("the pages of %s do not end", queue)
	return nil
}

// walkAllDead returns every dead record of queue.
func walkAllDead(t *testing.T, b *broker.Broker, queue string) []*job.DeadRecord {
	t.Helper()
	var out []*job.DeadRecord
	var cur protocol.DeadCursor
	for range 100 {
		recs, next, err := protocol.Dead(b).Page(context.Background(), queue, cur, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
		if next.IsZero() {
			return out
		}
		cur = next
	}
	t.Fatalf("the dead pages of %s do not end", queue)
	return nil
}

// walkListAll returns every page of the dead letters of every queue.
func walkListAll(t *testing.T, in *deadletter.Inspector) []deadletter.Page {
	t.Helper()
	var out []deadletter.Page
	o := deadletter.ListOptions{Limit: protocol.DeadPageMax}
	for range 100 {
		p, err := in.List(context.Background(), "", o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
		if p.Next == "" {
			return out
		}
		o.Cursor = p.Next
	}
	t.Fatal("the dead letters do not end")
	return nil
}

// TestBrokerChanges runs every changing method of *broker.Broker.
func TestBrokerChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := func(e *env, d time.Duration) time.Time { return e.base.Add(d) }
	fresh := func(e *env, i int, id string, ready time.Time) *job.Envelope {
		return envelope(e.side, orders, id, 200+i, ready)
	}
	runChanges(t, []changeCase{
		{name: "Enqueue/batch", ask: func(t *testing.T, e *env) any {
			var envs []*job.Envelope
			for i := range 8 {
				envs = append(envs, fresh(e, i, newID(i), at(e, 90*time.Minute+time.Duration(i/2)*30*time.Second)))
			}
			envs = append(envs,
				fresh(e, 8, futureID(5), at(e, 5*time.Hour)),     // scheduled: duplicate
				fresh(e, 9, processingID(3), at(e, 5*time.Hour)), // processing: duplicate
				fresh(e, 10, deadID(8), at(e, 5*time.Hour)),      // dead only: a new job
				envelope(e.side, mail, "m-n-0", 3, at(e, 2*time.Hour)))
			envs[len(envs)-2].Delay, envs[len(envs)-2].At = 10*time.Minute, time.Time{}
			err := e.b.Enqueue(ctx, envs...)
			return enqueueAnswer(envs, err)
		}},
		{name: "Enqueue/one at a time", ask: func(t *testing.T, e *env) any {
			var out []any
			for i, id := range []string{newID(0), futureID(5), processingID(3), deadID(9), newID(0)} {
				env := fresh(e, i, id, time.Time{})
				env.Delay = time.Duration(i) * time.Minute
				err := e.b.Enqueue(ctx, env)
				out = append(out, enqueueAnswer([]*job.Envelope{env}, err))
			}
			return out
		}},
		{name: "Enqueue/refused batch", noop: true, ask: func(t *testing.T, e *env) any {
			envs := []*job.Envelope{fresh(e, 0, newID(0), time.Time{}), fresh(e, 1, newID(1), time.Time{}), fresh(e, 2, "bad id\n", time.Time{})}
			err := e.b.Enqueue(ctx, envs...)
			return enqueueAnswer(envs, err)
		}},
		{name: "Cancel", ask: func(t *testing.T, e *env) any {
			out := map[string]any{}
			for _, id := range []string{futureID(0), dueID(3), retriedID(0), redeadID, processingID(0), deadID(9), ackedID(1), "never-enqueued", ""} {
				out[id] = cancelOut(e.b.Cancel(ctx, orders, id))
			}
			out["mail/m-s-1"] = cancelOut(e.b.Cancel(ctx, mail, "m-s-1"))
			out["bad queue"] = cancelOut(e.b.Cancel(ctx, "bad queue!", "x"))
			return out
		}},
		{name: "Cancel/refused", noop: true, ask: func(t *testing.T, e *env) any {
			return []any{cancelOut(e.b.Cancel(ctx, orders, deadID(12))), cancelOut(e.b.Cancel(ctx, orders, "never-enqueued"))}
		}},
		{name: "Reschedule", ask: func(t *testing.T, e *env) any {
			out := map[string]any{}
			for id, to := range map[string]time.Time{
				futureID(10): at(e, 4*time.Hour), dueID(0): {}, redeadID: at(e, 90*time.Minute),
				futureID(11):    at(e, time.Hour+2*time.Minute+500*time.Microsecond), // rounded up to the next ms
				processingID(0): at(e, time.Hour), deadID(1): at(e, time.Hour), "never-enqueued": at(e, time.Hour),
			} {
				ready, err := e.b.Reschedule(ctx, orders, id, to)
				out[id] = []any{ready, errOut(err)}
			}
			return out
		}},
		{name: "RescheduleAfter", ask: func(t *testing.T, e *env) any {
			out := map[string]any{}
			for id, d := range map[string]time.Duration{
				futureID(11): 45 * time.Minute, dueID(1): 0, retriedID(0): 3 * time.Hour,
				processingID(0): time.Minute, deadID(1): time.Minute, "never-enqueued": time.Minute, futureID(2): -time.Second,
			} {
				ready, err := e.b.RescheduleAfter(ctx, orders, id, d)
				out[id] = []any{ready, errOut(err)}
			}
			return out
		}},
		{name: "Redrive", ask: func(t *testing.T, e *env) any {
			ids := []string{deadID(0), deadID(1), deadID(2), deadID(9), redeadID, processingID(5), "never-enqueued", deadID(30), deadID(54)}
			one := deadletter.New(e.b).Redrive(ctx, orders, 0, deadID(12))
			many := deadletter.New(e.b).Redrive(ctx, orders, 5*time.Minute, ids...)
			again := deadletter.New(e.b).Redrive(ctx, orders, 0, deadID(12))
			bad := deadletter.New(e.b).Redrive(ctx, orders, -time.Second, deadID(8))
			none := deadletter.New(e.b).Redrive(ctx, orders, 0)
			mailOne := deadletter.New(e.b).Redrive(ctx, mail, time.Minute, "m-d-0")
			return []any{errOut(one), errOut(many), errOut(again), errOut(bad), errOut(none), errOut(mailOne)}
		}},
		{name: "DeadDelete", ask: func(t *testing.T, e *env) any {
			ids := []string{deadID(0), deadID(9), deadID(12), redeadID, processingID(5), "never-enqueued", deadID(30), deadID(54), deadID(0)}
			return []any{errOut(deadletter.New(e.b).Delete(ctx, orders, ids...)), errOut(deadletter.New(e.b).Delete(ctx, orders, deadID(1))),
				errOut(deadletter.New(e.b).Delete(ctx, orders, deadID(1))), errOut(deadletter.New(e.b).Delete(ctx, "bad queue!", "x"))}
		}},
		{name: "DeadPurge", ask: func(t *testing.T, e *env) any {
			purge := func(q string) (int64, error) {
				res, err := deadletter.New(e.b).DeleteAll(ctx, q, deadletter.Filter{}, deadletter.BulkOptions{})
				return int64(res.Done), err
			}
			n, err := purge(orders)
			if n != nDead {
				t.Errorf("%s: DeadPurge(orders) = %d, %v; want %d", e.name, n, err, nDead)
			}
			again, errAgain := purge(orders)
			m, errMail := purge(mail)
			return []any{n, errOut(err), again, errOut(errAgain), m, errOut(errMail)}
		}},
		{name: "DeadTrim/max age", ask: func(t *testing.T, e *env) any {
			// Records died from base-30m to base-16m30s; the clock is at
			// base+30s: a max age of 20m drops those before base-19m30s.
			b := testkit.NewBroker(t, e.rdb, broker.Options{Namespace: e.ns, DeadCap: -1, DeadMaxAge: 20 * time.Minute})
			protocol.UseClock(b, e.pinnedNow)
			n, err := deadletter.New(b).Trim(ctx, orders)
			if want := int64(42); n != want {
				t.Errorf("%s: DeadTrim = %d, %v; want %d", e.name, n, err, want)
			}
			again, errAgain := deadletter.New(b).Trim(ctx, orders)
			return []any{n, errOut(err), again, errOut(errAgain)}
		}},
		{name: "DeadTrim/within the cap", noop: true, ask: func(t *testing.T, e *env) any {
			b := testkit.NewBroker(t, e.rdb, broker.Options{Namespace: e.ns})
			protocol.UseClock(b, e.pinnedNow)
			n, err := deadletter.New(b).Trim(ctx, orders)
			return []any{n, errOut(err)}
		}},
		{name: "DeclareQueue", ask: func(t *testing.T, e *env) any {
			// The error text names the counts, which differ by design:
			// compare what callers test for.
			own := e.b.DeclareQueue(ctx, orders, e.shards)
			other := e.b.DeclareQueue(ctx, orders, 2)
			fresh := e.b.DeclareQueue(ctx, "fresh", 2)
			freshAgain := e.b.DeclareQueue(ctx, "fresh", 2)
			freshOther := e.b.DeclareQueue(ctx, "fresh", 3)
			bad := e.b.DeclareQueue(ctx, "fresh2", 257) // one more than the most shards a queue may have
			shards, err := protocol.Admin(e.b).Shards(ctx, "fresh")
			return []any{own, sentinels(other), fresh, freshAgain, sentinels(freshOther), errOut(bad), len(shards), errOut(err)}
		}},
	})
}

// TestInspectorChanges runs every changing method of deadletter.Inspector.
func TestInspectorChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bulk := func(res deadletter.BulkResult, err error) any {
		return map[string]any{"done": res.Done, "failed": res.Failed, "first": errOut(res.Err), "err": errOut(err)}
	}
	runChanges(t, []changeCase{
		{name: "Redrive", ask: func(t *testing.T, e *env) any {
			return []any{errOut(e.dl.Redrive(ctx, orders, 0, deadID(0))), errOut(e.dl.Redrive(ctx, orders, time.Minute, deadID(1), redeadID, "never-enqueued", deadID(54)))}
		}},
		{name: "Delete", ask: func(t *testing.T, e *env) any {
			return []any{errOut(e.dl.Delete(ctx, orders, deadID(0))), errOut(e.dl.Delete(ctx, orders, deadID(1), redeadID, "never-enqueued", deadID(54)))}
		}},
		{name: "RedriveAll/type", ask: func(t *testing.T, e *env) any {
			var progress []any
			res, err := e.dl.RedriveAll(ctx, orders, deadletter.Filter{Type: "order.ship"}, deadletter.BulkOptions{Batch: 4, Delay: time.Minute,
				Progress: func(r deadletter.BulkResult) { progress = append(progress, bulk(r, nil)) }})
			return []any{bulk(res, err), progress}
		}},
		{name: "RedriveAll/every queue", ask: func(t *testing.T, e *env) any {
			res, err := e.dl.RedriveAll(ctx, "", deadletter.Filter{}, deadletter.BulkOptions{})
			if res.Done != nDead+2-1 || res.Failed != 1 {
				t.Errorf("%s: RedriveAll of every queue = %+v, %v; want %d done and %s failed", e.name, res, err, nDead+1, redeadID)
			}
			return bulk(res, err)
		}},
		{name: "RedriveAll/time and error", ask: func(t *testing.T, e *env) any {
			f := filters(e.base)["died after"]
			f.ErrorContains = "panic"
			res, err := e.dl.RedriveAll(ctx, "", f, deadletter.BulkOptions{Batch: 1})
			return bulk(res, err)
		}},
		{name: "RedriveAll/bad options", noop: true, ask: func(t *testing.T, e *env) any {
			res, err := e.dl.RedriveAll(ctx, orders, deadletter.Filter{}, deadletter.BulkOptions{Delay: -time.Second})
			res2, err2 := e.dl.RedriveAll(ctx, orders, deadletter.Filter{}, deadletter.BulkOptions{Batch: protocol.DeadPageMax + 1})
			return []any{bulk(res, err), bulk(res2, err2)}
		}},
		{name: "DeleteAll/error", ask: func(t *testing.T, e *env) any {
			res, err := e.dl.DeleteAll(ctx, orders, deadletter.Filter{ErrorContains: "timeout"}, deadletter.BulkOptions{Batch: 5})
			return bulk(res, err)
		}},
		{name: "DeleteAll/every queue, time", ask: func(t *testing.T, e *env) any {
			res, err := e.dl.DeleteAll(ctx, "", filters(e.base)["died before"], deadletter.BulkOptions{})
			return bulk(res, err)
		}},
		{name: "DeleteAll/every queue, no filter", ask: func(t *testing.T, e *env) any {
			res, err := e.dl.DeleteAll(ctx, "", deadletter.Filter{}, deadletter.BulkOptions{})
			return bulk(res, err)
		}},
		{name: "DeleteAll/orders, no filter", ask: func(t *testing.T, e *env) any {
			res, err := e.dl.DeleteAll(ctx, orders, deadletter.Filter{}, deadletter.BulkOptions{})
			return bulk(res, err)
		}},
		{name: "Trim/every queue", ask: func(t *testing.T, e *env) any {
			b := testkit.NewBroker(t, e.rdb, broker.Options{Namespace: e.ns, DeadCap: -1, DeadMaxAge: 25 * time.Minute})
			protocol.UseClock(b, e.pinnedNow)
			n, err := deadletter.New(b).Trim(ctx, "")
			return []any{n, errOut(err)}
		}},
	})
}

// TestCLIChanges runs every delayq subcommand that changes jobs.
func TestCLIChanges(t *testing.T) {
	t.Parallel()
	at := func(e *env, d time.Duration) string { return e.base.Add(d).UTC().Format(time.RFC3339) }
	with := func(f func(e *env) []string) question {
		return func(t *testing.T, e *env) any { return e.cli(t, "", f(e)...) }
	}
	runChanges(t, []changeCase{
		{name: "jobs cancel", ask: run("jobs", "cancel", "-q", orders, futureID(0), dueID(3), redeadID, processingID(0), deadID(9), "never-enqueued", "--json")},
		{name: "jobs cancel/one", ask: run("jobs", "cancel", "-q", orders, retriedID(0))},
		{name: "jobs cancel/in progress", noop: true, ask: run("jobs", "cancel", "-q", orders, processingID(3))},
		{name: "jobs reschedule/at", ask: with(func(e *env) []string {
			return []string{"jobs", "reschedule", futureID(10), "-q", orders, "--at", at(e, 4*time.Hour), "--json"}
		})},
		{name: "jobs reschedule/in", ask: run("jobs", "reschedule", dueID(0), "-q", orders, "--in", "45m")},
		{name: "jobs reschedule/now", ask: run("jobs", "reschedule", futureID(11), "-q", orders, "--in", "0", "--json")},
		{name: "jobs reschedule/in progress", noop: true, ask: run("jobs", "reschedule", processingID(0), "-q", orders, "--in", "1m", "--json")},
		{name: "jobs reschedule/not found", noop: true, ask: run("jobs", "reschedule", deadID(1), "-q", orders, "--in", "1m")},
		{name: "enqueue/at", ask: with(func(e *env) []string {
			return []string{"enqueue", "-q", orders, "--type", "order.ship", "--payload", `{"n": 1, "to": "x"}`, "--id", newID(0), "--at", at(e, 2*time.Hour), "--json"}
		})},
		{name: "enqueue/in, payload from stdin", ask: func(t *testing.T, e *env) any {
			return e.cli(t, "{\n  \"from\": \"stdin\"\n}\n", "enqueue", "-q", orders, "--type", "order.ship", "--payload", "-", "--id", newID(3), "--in", "90m", "--max-retries", "2")
		}},
		{name: "enqueue/dead id", ask: run("enqueue", "-q", orders, "--type", "order.ship", "--payload", "[]", "--id", deadID(8), "--json")},
		{name: "enqueue/duplicate", noop: true, ask: run("enqueue", "-q", orders, "--type", "order.ship", "--payload", "{}", "--id", futureID(5), "--json")},
		{name: "enqueue/duplicate of a processing job", noop: true, ask: run("enqueue", "-q", orders, "--type", "order.ship", "--payload", "{}", "--id", processingID(3))},
		{name: "dead redrive/ids", ask: run("dead", "redrive", "-q", orders, deadID(0), deadID(1), redeadID, "never-enqueued", deadID(54), "--in", "10m", "--json")},
		{name: "dead redrive/one", ask: run("dead", "redrive", "-q", orders, deadID(30))},
		{name: "dead redrive/type", ask: run("dead", "redrive", "--type", "order.ship", "--yes", "--batch", "3", "--json")},
		{name: "dead redrive/all of orders", ask: run("dead", "redrive", "--all", "-q", orders, "--yes", "--json")},
		{name: "dead redrive/all", ask: run("dead", "redrive", "--all", "--yes")},
		{name: "dead redrive/error, since", ask: with(func(e *env) []string {
			return []string{"dead", "redrive", "--error", "timeout", "--since", at(e, -24*time.Minute), "--yes", "--in", "1h", "--json"}
		})},
		{name: "dead redrive/not confirmed", noop: true, ask: run("dead", "redrive", "--all", "-q", orders)},
		{name: "dead rm/ids", ask: run("dead", "rm", "-q", orders, deadID(0), deadID(9), redeadID, "never-enqueued", "--json")},
		{name: "dead rm/type", ask: run("dead", "rm", "--type", "order.refund", "--yes", "--json")},
		{name: "dead rm/all of orders", ask: run("dead", "rm", "--all", "-q", orders, "--yes")},
		{name: "dead rm/until, every queue", ask: with(func(e *env) []string {
			return []string{"dead", "rm", "--until", at(e, -25*time.Minute), "--yes", "--json"}
		})},
		{name: "dead rm/answered no", noop: true, ask: func(t *testing.T, e *env) any {
			return e.cli(t, "n\n", "dead", "rm", "--all", "--json")
		}},
		{name: "dead purge/orders", ask: run("dead", "purge", "-q", orders, "--yes", "--json")},
		{name: "dead purge/every queue", ask: run("dead", "purge", "--yes")},
		{name: "dead purge/answered yes", ask: func(t *testing.T, e *env) any {
			return e.cli(t, "yes\n", "dead", "purge", "-q", orders, "--json")
		}},
		{name: "dead trim/max age", ask: run("dead", "trim", "-q", orders, "--cap", "-1", "--max-age", "20m", "--json")},
		{name: "dead trim/every queue", ask: run("dead", "trim", "--cap", "-1", "--max-age", "25m")},
		{name: "dead trim/within limits", noop: true, ask: run("dead", "trim", "--json")},
	})
}

// act posts a form from the page at from to path and then fetches the
// page it redirects to: the two responses.
func act(from, path string, form url.Values) question {
	return func(t *testing.T, e *env) any {
		w := e.web(t)
		res := w.post(t, from, path, cloneForm(form))
		out := []any{res}
		if res.Status == http.StatusSeeOther {
			out = append(out, w.get(t, res.Location))
		}
		return out
	}
}

func cloneForm(f url.Values) url.Values {
	out := url.Values{}
	for k, v := range f {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestDashboardChanges runs every dashboard action, with the CSRF token of
// the page that shows its form.
func TestDashboardChanges(t *testing.T) {
	t.Parallel()
	jobPage := func(id string) string { return "/queues/orders/job?id=" + id }
	deadJob := func(id string) string { return "/dead/orders/job?id=" + id }
	runChanges(t, []changeCase{
		{name: "cancel", ask: act(jobPage(futureID(2)), "/queues/orders/cancel", url.Values{"id": {futureID(2)}, "confirmed": {"yes"}})},
		{name: "cancel/asks first", noop: true, ask: act(jobPage(futureID(2)), "/queues/orders/cancel", url.Values{"id": {futureID(2)}})},
		{name: "cancel/in progress", noop: true, ask: act(jobPage(dueID(1)), "/queues/orders/cancel", url.Values{"id": {processingID(0)}, "confirmed": {"yes"}})},
		{name: "cancel/not found", noop: true, ask: act(jobPage(dueID(1)), "/queues/orders/cancel", url.Values{"id": {deadID(9)}, "confirmed": {"yes"}})},
		{name: "reschedule/run now", ask: act(jobPage(futureID(10)), "/queues/orders/reschedule", url.Values{"id": {futureID(10)}, "in": {"0"}})},
		{name: "reschedule/in", ask: act(jobPage(dueID(3)), "/queues/orders/reschedule", url.Values{"id": {dueID(3)}, "in": {"15m"}})},
		{name: "reschedule/at", ask: func(t *testing.T, e *env) any {
			to := e.base.Add(6 * time.Hour).UTC().Format("2006-01-02T15:04:05")
			return act(jobPage(redeadID), "/queues/orders/reschedule", url.Values{"id": {redeadID}, "at": {to}})(t, e)
		}},
		{name: "reschedule/bad delay", noop: true, ask: act(jobPage(futureID(0)), "/queues/orders/reschedule", url.Values{"id": {futureID(0)}, "in": {"soon"}})},
		{name: "redrive", ask: act("/dead?queue=orders", "/dead/orders/redrive", url.Values{"id": {deadID(12)}})},
		{name: "redrive/pending again", noop: true, ask: act(deadJob(redeadID), "/dead/orders/redrive", url.Values{"id": {redeadID}})},
		{name: "redrive all/filter", ask: act("/dead?queue=orders&type=order.create", "/dead/redrive-all", url.Values{"queue": {orders}, "type": {"order.create"}, "confirmed": {"yes"}})},
		{name: "redrive all/every queue", ask: act("/dead", "/dead/redrive-all", url.Values{"queue": {""}, "confirmed": {"yes"}})},
		{name: "redrive all/asks first", noop: true, ask: act("/dead", "/dead/redrive-all", url.Values{"queue": {""}})},
		{name: "delete", ask: act(deadJob(deadID(30)), "/dead/orders/delete", url.Values{"id": {deadID(30)}, "confirmed": {"yes"}})},
		{name: "delete/not found", noop: true, ask: act(deadJob(deadID(30)), "/dead/orders/delete", url.Values{"id": {futureID(1)}, "confirmed": {"yes"}})},
		{name: "purge", ask: act("/dead?queue=orders", "/dead/orders/purge", url.Values{"confirmed": {"yes"}})},
		{name: "purge/asks first", noop: true, ask: act("/dead?queue=orders", "/dead/orders/purge", url.Values{})},
	})
}
