package broker_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

func TestJobInEachState(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("s", time.Minute), env("p", 0), env("d", 0))
	tb.clock.Advance(2 * time.Second)
	res := tb.claim(t, 2) // d then p: equal ready times go in id order
	if _, err := testkit.Drive(tb.b).Kill(tb.ctx, res.Jobs[0].Lease, &job.DeadRecord{Type: "t", Body: res.Jobs[0].Body, Error: "boom", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(time.Second)

	s, err := tb.b.Job(tb.ctx, "q", "s")
	if err != nil {
		t.Fatal(err)
	}
	if s.State != job.StateScheduled || !s.ReadyAt.Equal(epoch.Add(time.Minute)) || s.Attempts != 0 ||
		s.Envelope == nil || s.Envelope.Type != "t" || s.Envelope.ID != "s" || !s.Now.Equal(epoch.Add(3*time.Second)) {
		t.Fatalf("scheduled job: %+v", s)
	}
	if s.Now.After(s.ReadyAt) || !s.LeaseDeadline.IsZero() {
		t.Fatalf("scheduled job not yet due: %+v", s)
	}

	p, err := tb.b.Job(tb.ctx, "q", "p")
	if err != nil {
		t.Fatal(err)
	}
	if p.State != job.StateProcessing || p.Attempts != 1 || p.LeaseDeadline.Sub(p.Now) != 9*time.Second ||
		string(p.Envelope.Payload) != `{"n":1}` {
		t.Fatalf("processing job: %+v, lease remaining %v", p, p.LeaseDeadline.Sub(p.Now))
	}

	d, err := tb.b.Job(tb.ctx, "q", "d")
	if err != nil {
		t.Fatal(err)
	}
	if d.State != job.StateDead || d.Dead == nil || d.Dead.Error != "boom" || d.Attempts != 1 ||
		!d.Dead.DiedAt.Equal(epoch.Add(2*time.Second)) || d.Envelope == nil || d.Envelope.Type != "t" {
		t.Fatalf("dead job: %+v (record %+v)", d, d.Dead)
	}

	if _, err := tb.b.Job(tb.ctx, "q", "nope"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := tb.b.Job(tb.ctx, "q", "a{b"); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}

	// A dead job enqueued again under its id is reported as pending.
	tb.enqueue(t, env("d", time.Hour))
	if again, err := tb.b.Job(tb.ctx, "q", "d"); err != nil || again.State != job.StateScheduled {
		t.Fatalf("re-enqueued dead id: %+v, %v", again, err)
	}
}

func TestJobCorruptEnvelope(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	tb.rdb.HSet(tb.ctx, tb.key("q", "jobs"), "a", "not json")
	j, err := tb.b.Job(tb.ctx, "q", "a")
	if err != nil {
		t.Fatal(err)
	}
	if j.Envelope != nil || !errors.Is(j.Err, job.ErrCorrupt) || string(j.Body) != "not json" {
		t.Fatalf("corrupt job: %+v", j)
	}
}

// pageAll reads every page of the scheduled set, calling between after each
// page.
func pageAll(t *testing.T, tb *testBundle, limit int, between func(page int)) []string {
	t.Helper()
	var seen []string
	var cur string
	for page := 0; ; page++ {
		p, err := tb.b.ScheduledPage(tb.ctx, "q", cur, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Jobs) > limit {
			t.Fatalf("page of %d jobs, limit %d", len(p.Jobs), limit)
		}
		for _, j := range p.Jobs {
			seen = append(seen, j.ID)
		}
		if p.Next == "" {
			return seen
		}
		cur = p.Next
		if between != nil {
			between(page)
		}
	}
}

func TestScheduledPageOrderAndCursor(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	// Many jobs share a ready time, so the cursor must order by id too.
	var envs []*job.Envelope
	var want []string
	for i := range 120 {
		id := fmt.Sprintf("j%03d", i)
		envs = append(envs, env(id, time.Duration(i/40)*time.Second))
		want = append(want, id)
	}
	tb.enqueue(t, envs...)
	for _, limit := range []int{1, 7, 40, 1000} {
		if got := pageAll(t, tb, limit, nil); !slices.Equal(got, want) {
			t.Fatalf("limit %d: paged %d jobs %v, want %d in order", limit, len(got), got, len(want))
		}
	}

	p, err := tb.b.ScheduledPage(tb.ctx, "q", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if j := p.Jobs[1]; j.ID != "j001" || !j.ReadyAt.Equal(epoch) || j.Envelope.MaxRetries != 3 || !p.Now.Equal(epoch) {
		t.Fatalf("page entry %+v now %v", j, p.Now)
	}
	for _, limit := range []int{0, -1, broker.MaxPageLimit + 1} {
		if _, err := tb.b.ScheduledPage(tb.ctx, "q", "", limit); !errors.Is(err, job.ErrInvalid) {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
}

func TestScheduledPageWhileJobsMove(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var envs []*job.Envelope
	for i := range 100 {
		envs = append(envs, env(fmt.Sprintf("j%03d", i), time.Duration(i/10)*time.Second))
	}
	tb.enqueue(t, envs...)
	moved := map[string]bool{}
	got := pageAll(t, tb, 9, func(page int) {
		// Between pages: the cursor's own job and others leave or move.
		switch page {
		case 0:
			// j008 is the cursor (the page's last job): cancel it.
			if _, err := tb.b.Cancel(tb.ctx, "q", "j008"); err != nil {
				t.Fatal(err)
			}
			moved["j008"] = true
		case 1:
			// Reschedule a job not yet seen far into the future, and one
			// already seen to the end as well: each may then be seen again.
			for _, id := range []string{"j050", "j003"} {
				if _, err := tb.b.Reschedule(tb.ctx, "q", id, epoch.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
				moved[id] = true
			}
		case 3:
			// Enqueue new jobs before and after the cursor.
			tb.enqueue(t, env("early", 0), env("late", 30*time.Second))
			moved["early"], moved["late"] = true, true
		}
	})
	count := map[string]int{}
	for _, id := range got {
		count[id]++
	}
	for _, e := range envs {
		if !moved[e.ID] && count[e.ID] != 1 {
			t.Errorf("job %s seen %d times, want once", e.ID, count[e.ID])
		}
	}
	if count["late"] != 1 {
		t.Errorf("job enqueued ahead of the cursor seen %d times, want once", count["late"])
	}
}

// TestPageOtherState: Page pages through the scheduled and the processing
// jobs only; another state is refused.
func TestPageOtherState(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, st := range []job.JobState{job.StateDead, job.StateSucceeded, ""} {
		if _, err := tb.b.Page(tb.ctx, "q", st, "", 10); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("Page of state %q: %v, want job.ErrInvalid", st, err)
		}
	}
}

func TestProcessingPage(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", 0), env("c", 0))
	tb.claim(t, 2)
	tb.clock.Advance(4 * time.Second)
	p, err := tb.b.ProcessingPage(tb.ctx, "q", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Jobs) != 1 || p.Next == "" {
		t.Fatalf("first page %+v", p)
	}
	a := p.Jobs[0]
	if a.ID != "a" || a.State != job.StateProcessing || a.Attempts != 1 || a.LeaseDeadline.Sub(a.Now) != 6*time.Second {
		t.Fatalf("processing job %+v, lease remaining %v", a, a.LeaseDeadline.Sub(a.Now))
	}
	p, err = tb.b.ProcessingPage(tb.ctx, "q", p.Next, 1)
	if err != nil || len(p.Jobs) != 1 || p.Jobs[0].ID != "b" || p.Next != "" {
		t.Fatalf("second page %+v, %v", p, err)
	}
	tb.clock.Advance(time.Minute)
	p, _ = tb.b.ProcessingPage(tb.ctx, "q", "", 10)
	if r := p.Jobs[0].LeaseDeadline.Sub(p.Jobs[0].Now); r > 0 {
		t.Fatalf("expired lease reports %v remaining", r)
	}
}

// TestStatsEveryQueue: Stats with no queue named reads every known
// queue, sorted by name.
func TestStatsEveryQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if all, err := tb.b.Stats(tb.ctx); err != nil || all == nil || len(all) != 0 {
		t.Fatalf("no queue yet: %+v, %v; want an empty list", all, err)
	}
	a, b := env("1", 0), env("2", time.Minute)
	a.Queue, b.Queue = "zeta", "alpha"
	tb.enqueue(t, a, b)
	all, err := tb.b.Stats(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Queue != "alpha" || all[0].Scheduled != 1 || all[0].Due != 0 ||
		all[1].Queue != "zeta" || all[1].Due != 1 {
		t.Fatalf("Stats() = %+v", all)
	}
}

func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		args []string
		want string
		safe bool
	}{
		{"noeviction", []string{"--maxmemory-policy", "noeviction"}, "noeviction", true},
		{"allkeys", []string{"--maxmemory-policy", "allkeys-lru"}, "allkeys-lru", false},
		{"volatile", []string{"--maxmemory-policy", "volatile-ttl"}, "volatile-ttl", true},
		{"config disabled", []string{"--rename-command", "CONFIG", ""}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, tc.args...)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			b, err := broker.New(rdb, broker.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.EvictionPolicy(ctx)
			if tc.want == "" {
				if !errors.Is(err, broker.ErrConfigUnavailable) {
					t.Fatalf("EvictionPolicy = %q, %v; want ErrConfigUnavailable", got, err)
				}
				return
			}
			if err != nil || got != tc.want || broker.EvictionSafe(got) != tc.safe {
				t.Fatalf("EvictionPolicy = %q, %v (safe %v); want %q (safe %v)", got, err, broker.EvictionSafe(got), tc.want, tc.safe)
			}
		})
	}
}

// TestStatsLeavesOutUnreadableQueues: a queue whose dead-letter index
// another program overwrote with a string, and one whose shard count in
// ns:shards is not a number, do not hide the other queues' stats, whether
// every queue is read or some are named: they are returned with a
// *broker.QueueErrors naming each queue left out and the key or record to
// repair. Stats of the broken queue alone is that error.
func TestStatsLeavesOutUnreadableQueues(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, q := range []string{"good", "bad"} {
		e := env("a", 0)
		e.Queue = q
		tb.enqueue(t, e)
	}
	index := tb.key("bad", "dead:index")
	if err := tb.rdb.Set(tb.ctx, index, "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	shards := keyspace.ShardsKey(tb.ns)
	tb.rdb.HSet(tb.ctx, shards, "badcount", "many")
	tb.rdb.SAdd(tb.ctx, keyspace.QueuesKey(tb.ns), "badcount")
	all, err := tb.b.Stats(tb.ctx)
	var qe *broker.QueueErrors
	if !errors.As(err, &qe) || len(all) != 1 || all[0].Queue != "good" || all[0].Scheduled != 1 {
		t.Fatalf("Stats(): %+v, %v; want good's stats and a *QueueErrors", all, err)
	}
	if len(qe.Errs) != 2 || !strings.Contains(qe.Errs["bad"].Error(), index) ||
		!strings.Contains(qe.Errs["badcount"].Error(), `"many", not a number (field "badcount" of `+shards) {
		t.Fatalf("left out %v", qe.Errs)
	}
	named, err := tb.b.Stats(tb.ctx, "bad", "good")
	if !errors.As(err, &qe) || len(named) != 1 || named[0].Queue != "good" || len(qe.Errs) != 1 || !strings.Contains(qe.Errs["bad"].Error(), index) {
		t.Fatalf("Stats(bad, good): %+v, %v; want good's stats and a *QueueErrors naming %s", named, err, index)
	}
	if _, err := testkit.OneStats(tb.b.Stats(tb.ctx, "bad")); err == nil || !strings.Contains(err.Error(), index) {
		t.Fatalf("Stats of a broken queue: %v; want an error naming %s", err, index)
	}
}

// TestPageCursorFormat: a page's Next is base64url("<ms>:<id>") of its last
// job (the form the dashboard's links have always carried, and
// internal/shardtest's cursorAt builds); a cursor that is not one is
// refused with ErrBadCursor, which wraps job.ErrInvalid, before Redis is
// read, and changes nothing.
func TestPageCursorFormat(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", time.Minute), env("b", 2*time.Minute), env("c", 3*time.Minute))
	p, err := tb.b.ScheduledPage(tb.ctx, "q", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(p.Next)
	if want := fmt.Sprintf("%d:b", p.Jobs[1].ReadyAt.UnixMilli()); err != nil || string(raw) != want {
		t.Fatalf("Next %q decodes to %q, %v; want %q", p.Next, raw, err, want)
	}
	for _, bad := range []string{"!!", base64.RawURLEncoding.EncodeToString([]byte("no colon")),
		base64.RawURLEncoding.EncodeToString([]byte("12:{bad id}")), base64.RawURLEncoding.EncodeToString([]byte("x:b"))} {
		for name, page := range map[string]func(context.Context, string, string, int) (broker.JobPage, error){"ScheduledPage": tb.b.ScheduledPage, "ProcessingPage": tb.b.ProcessingPage} {
			if _, err := page(tb.ctx, "q", bad, 2); !errors.Is(err, broker.ErrBadCursor) || !errors.Is(err, job.ErrInvalid) {
				t.Errorf("%s(cursor %q): %v; want ErrBadCursor", name, bad, err)
			}
		}
	}
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || st.Scheduled != 3 {
		t.Fatalf("stats %+v, %v; want the 3 jobs unchanged", st, err)
	}
}
