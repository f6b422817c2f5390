package broker_test

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

func (tb *testBundle) histKey(queue string, at time.Time) string {
	return tb.key(queue, "hist:"+strconv.FormatInt(at.UnixMilli()/60_000, 10))
}

func TestHistoryCountsOutcomes(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	// epoch is 20 s into its minute; jobs due at +1s, +3s and +5s.
	minute := epoch.Truncate(time.Minute)
	tb.enqueue(t, env("a", time.Second), env("b", 3*time.Second), env("c", 5*time.Second), env("d", time.Hour))
	tb.clock.Advance(10 * time.Second)
	res := tb.claim(t, 3) // lateness 9 s, 7 s, 5 s
	if len(res.Jobs) != 3 {
		t.Fatalf("claimed %v", ids(res.Jobs))
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, res.Jobs[1].Lease, time.Hour, res.Jobs[1].Envelope); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Drive(tb.b).Kill(tb.ctx, res.Jobs[2].Lease, &job.DeadRecord{Type: "t", Body: res.Jobs[2].Body, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	// A refused ack counts nothing.
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("second ack: %v", err)
	}
	// The next minute: nothing due, an empty claim counts nothing.
	tb.clock.Advance(time.Minute)
	tb.claim(t, 5)

	h, err := tb.b.History(tb.ctx, []string{"q", "other"}, minute.Add(-time.Minute), minute.Add(time.Minute+59*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || len(h[0]) != 3 || len(h[1]) != 3 {
		t.Fatalf("shape %d×%d", len(h), len(h[0]))
	}
	want := broker.Minute{Start: minute, Claimed: 3, Done: 1, Failed: 1, Dead: 1, LatenessSum: 21 * time.Second, LatenessMax: 9 * time.Second}
	if got := h[0][1]; got != want {
		t.Fatalf("minute: %+v\nwant     %+v", got, want)
	}
	if got := h[0][1]; got.Handled() != 3 || got.MeanLateness() != 7*time.Second {
		t.Fatalf("handled %d, mean lateness %v", got.Handled(), got.MeanLateness())
	}
	for _, m := range []broker.Minute{h[0][0], h[0][2], h[1][0], h[1][1], h[1][2]} {
		if m.Claimed != 0 || m.Handled() != 0 || m.MeanLateness() != 0 {
			t.Fatalf("quiet minute %+v", m)
		}
	}
	if !h[0][0].Start.Equal(minute.Add(-time.Minute)) || !h[1][2].Start.Equal(minute.Add(time.Minute)) {
		t.Fatalf("starts %v, %v", h[0][0].Start, h[1][2].Start)
	}
	ttl, err := tb.rdb.TTL(tb.ctx, tb.histKey("q", minute)).Result()
	if err != nil || ttl <= 23*time.Hour || ttl > broker.HistoryRetention {
		t.Fatalf("TTL of the minute's key: %v, %v", ttl, err)
	}
	if n, _ := tb.rdb.Exists(tb.ctx, tb.histKey("q", minute.Add(time.Minute))).Result(); n != 0 {
		t.Fatal("an empty claim wrote history")
	}
}

func TestHistoryLateMaxKeepsLargest(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	tb.clock.Advance(30 * time.Second)
	tb.enqueue(t, env("b", 0))
	tb.clock.Advance(time.Second)
	first := tb.claim(t, 1)  // a, 31 s late
	second := tb.claim(t, 1) // b, 1 s late: the max stays 31 s
	if first.Jobs[0].ID != "a" || second.Jobs[0].ID != "b" {
		t.Fatalf("claimed %v then %v", ids(first.Jobs), ids(second.Jobs))
	}
	h, err := tb.b.History(tb.ctx, []string{"q"}, tb.clock.Now(), tb.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m := h[0][0]; m.Claimed != 2 || m.LatenessMax != 31*time.Second || m.LatenessSum != 32*time.Second {
		t.Fatalf("minute %+v", m)
	}
}

// History is best effort: a history key that is not a hash (written by
// something else) must not stop jobs from moving.
func TestHistoryFailureDoesNotBlockJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0))
	if err := tb.rdb.Set(tb.ctx, tb.histKey("q", epoch), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res := tb.claim(t, 1)
	if len(res.Jobs) != 1 {
		t.Fatalf("claimed %v", ids(res.Jobs))
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Job(tb.ctx, "q", "a"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("job after ack: %v", err)
	}
	h, err := tb.b.History(tb.ctx, []string{"q"}, epoch, epoch)
	if err != nil || h[0][0].Handled() != 0 {
		t.Fatalf("history of a foreign key: %+v, %v", h, err)
	}
}

func TestHistoryBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for name, call := range map[string]func() error{
		"bad queue": func() error { _, err := tb.b.History(tb.ctx, []string{"a b"}, epoch, epoch); return err },
		"reversed": func() error {
			_, err := tb.b.History(tb.ctx, []string{"q"}, epoch, epoch.Add(-time.Minute))
			return err
		},
		"too long": func() error {
			_, err := tb.b.History(tb.ctx, []string{"q"}, epoch, epoch.Add(25*time.Hour))
			return err
		},
	} {
		if err := call(); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A span of exactly one day is allowed.
	if _, err := tb.b.History(tb.ctx, []string{"q"}, epoch.Add(-24*time.Hour), epoch); err != nil {
		t.Fatal(err)
	}
}

func TestStatsSeveralQueues(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", 0), env("b", time.Minute))
	other := env("c", 0)
	other.Queue = "r"
	tb.enqueue(t, other)
	tb.clock.Advance(time.Second)
	got, err := tb.b.Stats(tb.ctx, "q", "r", "empty")
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range []string{"q", "r", "empty"} {
		want, err := testkit.OneStats(tb.b.Stats(tb.ctx, q))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("Stats(q, r, empty)[%s] = %+v, Stats(%s) = %+v", q, got[i], q, want)
		}
	}
	if got[0].Scheduled != 2 || got[0].Due != 1 || got[1].Scheduled != 1 || got[2].Scheduled != 0 {
		t.Fatalf("counts %+v", got)
	}
	if _, err := tb.b.Stats(tb.ctx, "q", "no good"); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("bad queue: %v", err)
	}
	// No queue named: every known queue, sorted by name.
	all, err := tb.b.Stats(tb.ctx)
	if err != nil || len(all) != 2 || all[0].Queue != "q" || all[1].Queue != "r" {
		t.Fatalf("every queue: %+v, %v; want q and r", all, err)
	}
}

// Stats pipelines EVALSHA; a server that lost its script cache (restart,
// SCRIPT FLUSH) gets the script loaded again.
func TestStatsAfterScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := b.Enqueue(ctx, env("a", 0)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		s, err := b.Stats(ctx, "q")
		if err != nil || s[0].Scheduled != 1 {
			t.Fatalf("after SCRIPT FLUSH: %+v, %v", s, err)
		}
	}
}

func TestRescheduleAfter(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.enqueue(t, env("a", time.Hour), env("p", 0))
	ready, err := tb.b.RescheduleAfter(tb.ctx, "q", "a", 90*time.Second)
	if err != nil || !ready.Equal(epoch.Add(90*time.Second)) {
		t.Fatalf("RescheduleAfter: %v, %v", ready, err)
	}
	if ready, err = tb.b.RescheduleAfter(tb.ctx, "q", "a", 0); err != nil || !ready.Equal(epoch) {
		t.Fatalf("RescheduleAfter 0: %v, %v", ready, err)
	}
	tb.claim(t, 2) // both due now: a and p are processing
	if _, err := tb.b.RescheduleAfter(tb.ctx, "q", "p", time.Minute); !errors.Is(err, broker.ErrInProgress) {
		t.Fatalf("processing job: %v", err)
	}
	if _, err := tb.b.RescheduleAfter(tb.ctx, "q", "nope", time.Minute); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	tb.enqueue(t, env("b", time.Hour))
	if _, err := tb.b.RescheduleAfter(tb.ctx, "q", "b", -time.Second); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("negative delay: %v", err)
	}
	if j, _ := tb.b.Job(tb.ctx, "q", "b"); !j.ReadyAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("refused reschedule moved the job to %v", j.ReadyAt)
	}
}
