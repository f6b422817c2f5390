package integration_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
)

// periodicPauseAndRun drives the periodic page with a scheduler running an
// every-second schedule on a queue no worker serves: Pause shows the badge
// and no tick is enqueued while paused, Run now enqueues one job of the
// schedule, and Resume brings the ticks back.
func periodicPauseAndRun(t *testing.T, ctx context.Context, b *broker.Broker, base string) {
	t.Helper()
	s, err := periodic.New(b, periodic.Options{Poll: 100 * time.Millisecond, ProcessTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	report := job.New[email]("report.build", job.Queue("reports"))
	if err := periodic.Add(s, "every-second", "@every 1s", report, email{To: "ops@example.com"}); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	bg := context.Background()
	scheduled := func() int64 {
		t.Helper()
		st, err := testkit.OneStats(b.Stats(bg, "reports"))
		if err != nil {
			t.Fatal(err)
		}
		return st.Scheduled
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
		}
	}
	status := func() periodic.Status {
		t.Helper()
		list, err := periodic.List(bg, b, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range list {
			if st.Name == "every-second" {
				return st
			}
		}
		return periodic.Status{}
	}
	waitUntil("the first tick", func() bool { return scheduled() > 0 })

	pauseButton := `form[action$="/periodic/pause"] button.pause-schedule`
	do(t, ctx, "pause the schedule",
		chromedp.Navigate(base+"/periodic"),
		chromedp.WaitVisible(chromedp.CSS(pauseButton)),
		chromedp.Click(chromedp.CSS(pauseButton)),
		chromedp.WaitVisible(chromedp.ID("paused-every-second")),
	)
	if f := eval[string](t, ctx, `document.querySelector('.flash').innerText`); !strings.Contains(f, `Schedule "every-second" paused`) {
		t.Fatalf("flash after the pause: %q", f)
	}
	// Once a scheduler step passed a tick over, none is enqueued.
	waitUntil("a tick passed over", func() bool {
		o := status().Outcome
		return o != nil && o.Result == periodic.ResultPaused
	})
	before := scheduled()
	time.Sleep(2500 * time.Millisecond) // two ticks' time
	if after := scheduled(); after != before {
		t.Fatalf("%d ticks enqueued while the schedule was paused", after-before)
	}

	runButton := `form[action$="/periodic/run"] button.run-schedule`
	do(t, ctx, "run the schedule now",
		// A fresh page, without the pause's notice: the notice waited
		// for is the run's.
		chromedp.Navigate(base+"/periodic"),
		chromedp.WaitVisible(chromedp.CSS(runButton)),
		chromedp.Click(chromedp.CSS(runButton)),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	// The request id is the form's, made when the page was rendered (a
	// refresh renders a new one): read it from the notice.
	f := eval[string](t, ctx, `document.querySelector('.flash').innerText`)
	m := regexp.MustCompile(`Run now requested as job "(every-second@run:[0-9a-f]{16})"`).FindStringSubmatch(f)
	if m == nil {
		t.Fatalf("flash after run now: %q", f)
	}
	id := m[1]
	waitUntil("the run-now job", func() bool {
		_, err := b.Job(bg, "reports", id)
		return err == nil
	})
	if got := scheduled(); got != before+1 {
		t.Fatalf("%d jobs after run now while paused, want %d", got, before+1)
	}

	resumeButton := `form[action$="/periodic/resume"] button.resume-schedule`
	do(t, ctx, "resume the schedule",
		chromedp.WaitVisible(chromedp.CSS(resumeButton)),
		chromedp.Click(chromedp.CSS(resumeButton)),
		chromedp.WaitVisible(chromedp.CSS(pauseButton)),
	)
	if status().Paused {
		t.Fatal("the schedule is still paused")
	}
	waitUntil("a tick after the resume", func() bool { return scheduled() > before+1 })
}
