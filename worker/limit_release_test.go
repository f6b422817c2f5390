package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestLiftedLimitReleasesHeldJobsToASleepingWorker: a worker whose jobs a
// type's rate limit holds (one token an hour) sleeps on them; lifting the
// limit, or raising it, wakes it by notice (its MaxIdle is an hour, so
// nothing else could), and the held jobs run at once, each on its first
// attempt, in ready-time order.
func TestLiftedLimitReleasesHeldJobsToASleepingWorker(t *testing.T) {
	t.Parallel()
	for _, lift := range []struct {
		name string
		set  job.RateLimit
	}{
		{"cleared", job.RateLimit{}},
		{"raised", job.RateLimit{Count: 1000, Per: time.Second}},
	} {
		t.Run(lift.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			typ := job.New[payload]("sms.send")
			var done, late atomic.Int64
			order := make(chan int, 10)
			typ.Handle(tb.reg, func(_ context.Context, j *job.Job[payload]) error {
				if j.Attempt != 1 {
					late.Add(1)
				}
				order <- j.Args.N
				done.Add(1)
				return nil
			})
			if err := tb.b.SetRateLimit(tb.ctx, "default", "sms.send", job.RateLimit{Count: 1, Per: time.Hour}); err != nil {
				t.Fatal(err)
			}
			items := make([]job.Item[payload], 5)
			for i := range items {
				// Ready 1 ms apart, in order: the held ones keep that order.
				items[i] = job.Item[payload]{Args: payload{N: i}, Opts: []job.Option{job.In(time.Duration(i) * time.Millisecond)}}
			}
			if _, err := typ.EnqueueItems(tb.ctx, tb.b, items); err != nil {
				t.Fatal(err)
			}
			cfg := tb.config(t)
			cfg.MaxIdle = time.Hour
			start(t, cfg)
			redistest.WaitFor(t, 10*time.Second, "the one token's job done and four held", func() bool {
				st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
				return err == nil && done.Load() == 1 && st.HeldByRate["sms.send"] == 4
			})
			if err := tb.b.SetRateLimit(tb.ctx, "default", "sms.send", lift.set); err != nil {
				t.Fatal(err)
			}
			redistest.WaitFor(t, 20*time.Second, "the four held jobs done after the limit was "+lift.name, func() bool { return done.Load() == 5 })
			if late.Load() != 0 {
				t.Errorf("%d jobs ran on a later attempt: holding spent attempts", late.Load())
			}
			close(order)
			var got []int
			for n := range order {
				got = append(got, n)
			}
			if got[0] != 0 {
				t.Errorf("the token's job was %d, want the earliest (0); order %v", got[0], got)
			}
			st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
			if err != nil || st.Scheduled != 0 || st.HeldByRate["sms.send"] != 0 {
				t.Errorf("after the release: %+v, %v; want nothing left", st, err)
			}
		})
	}
}
