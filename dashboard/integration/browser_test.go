package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// chromiumPath finds headless Chromium: $DELAYQ_CHROMIUM, or chromium (as
// Debian's package installs it) on PATH. Without it the test is skipped,
// unless DELAYQ_REQUIRE_REDIS=1 (CI), where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DELAYQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const how = "install Debian's chromium package (apt-get install -y chromium) or set DELAYQ_CHROMIUM to a Chromium binary"
	if os.Getenv("DELAYQ_REQUIRE_REDIS") == "1" {
		t.Fatalf("chromium not found on PATH and DELAYQ_REQUIRE_REDIS=1: the browser test must run; %s", how)
	}
	t.Skipf("chromium not found on PATH: skipping the browser test; %s", how)
	return ""
}

// rebindHost is the attacker's domain of the DNS-rebinding case: Chromium
// resolves it to 127.0.0.1, as a rebound DNS answer would.
// refreshInterval is the dashboard's default auto-refresh period (Options.RefreshInterval).
const refreshInterval = 5 * time.Second

const rebindHost = "evil.example"

// browser starts headless Chromium with a fresh profile and returns a tab's
// context; everything is stopped at cleanup. rebindHost resolves to
// 127.0.0.1.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("host-resolver-rules", "MAP "+rebindHost+" 127.0.0.1"),
		chromedp.Flag("disable-features", "HttpsUpgrades"), // the attacker's origin is plain http
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process and removes its profile
	})
	// Bound the whole test, so a hung browser fails it instead of hanging.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dialogs answers every JavaScript dialog of the tab with accept and records
// its message.
type dialogs struct {
	mu   sync.Mutex
	msgs []string
}

func (d *dialogs) watch(t *testing.T, ctx context.Context) {
	t.Helper()
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opening {
			if err != nil {
				return
			}
			d.mu.Lock()
			d.msgs = append(d.msgs, ev.Message)
			d.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
}

func (d *dialogs) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.msgs...)
}

func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
	if err != nil {
		t.Fatalf("text of #%s: %v", id, err)
	}
	return strings.TrimSpace(s)
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestBrowser drives the dashboard in headless Chromium against a real
// redis-server: the overview shows the counts, a dead job is opened and
// redriven and a worker handles it, another is deleted through the
// confirmation dialog, a screenshot of the overview is saved (to
// docs/dashboard.png as well when DELAYQ_UPDATE_SCREENSHOT=1), and a DNS
// rebinding is played: the dashboard opened as evil.example (which
// Chromium resolves to 127.0.0.1) is refused, and a script on a page of
// that origin can neither read it nor purge its dead letters. Then a
// running job's page goes stale and gone, the processes page lists the
// live workers, and a rate limit and a cap set from a queue page hold jobs
// back, which the page shows (screenshots of those too), and a periodic
// schedule is paused, run now and resumed from the periodic page. CI sets
// DELAYQ_BROWSER=later for its parallel run of every package and runs this
// test alone afterwards.
func TestBrowser(t *testing.T) {
	if os.Getenv("DELAYQ_BROWSER") == "later" {
		t.Skip("DELAYQ_BROWSER=later: the browser test runs on its own later (.ci/run runs it at the end)")
	}
	chrome := chromiumPath(t)
	if _, err := redistest.ServerBinary(); err != nil && os.Getenv("DELAYQ_REQUIRE_REDIS") != "1" {
		t.Skipf("the browser test needs a real server: %v", err)
	}
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	seeded := seedDemo(t, rdb, "delayq")
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	attacker := &rebinder{dashboard: d}
	web := httptest.NewServer(attacker)
	t.Cleanup(web.Close)

	// A worker for "emails" reports the jobs it handles; nothing is due yet,
	// and the five processing jobs are leased to someone else for an hour.
	handled := make(chan string, 16)
	reg := job.NewRegistry()
	job.New[email]("email.send").Handle(reg, func(_ context.Context, j *job.Job[email]) error {
		handled <- j.ID
		return nil
	})
	// A slow job runs until it is cancelled; its handler reports why it stopped.
	stopped := make(chan error, 1)
	job.New[email]("email.slow", job.Queue("emails"), job.MaxRetries(0)).Handle(reg, func(ctx context.Context, _ *job.Job[email]) error {
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return context.Cause(ctx)
	})
	// A held job runs until the test releases it.
	release := make(chan struct{})
	job.New[email]("email.hold", job.Queue("emails")).Handle(reg, func(ctx context.Context, _ *job.Job[email]) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: "emails"}}, MaxIdle: time.Second, Logger: &logger})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { defer close(workerDone); _ = w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-workerDone })

	ctx := browser(t, chrome)
	var dlg dialogs
	dlg.watch(t, ctx)

	// Overview: the counts of the seeded state, and charts with the hour.
	do(t, ctx, "open the overview",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("total-scheduled")),
	)
	for id, want := range map[string]int{"total-scheduled": seeded.Scheduled, "total-processing": seeded.Processing, "total-dead": seeded.Dead} {
		if got := text(t, ctx, id); got != itoa(want) {
			t.Errorf("#%s shows %q, want %d", id, got, want)
		}
	}
	if got := text(t, ctx, "total-due"); got != "0" {
		t.Errorf("#total-due shows %q, want 0", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('svg.chart rect.s-done').length`); n < 60 {
		t.Errorf("the charts draw %d bars of done jobs, want the hour's", n)
	}
	emailsRow := eval[string](t, ctx, `document.getElementById('queue-emails').innerText`)
	for _, want := range []string{"emails", "30", "5", "10"} {
		if !strings.Contains(emailsRow, want) {
			t.Errorf("row of emails %q lacks %q", emailsRow, want)
		}
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, shot)

	// The dead letters of emails; open the one whose subject is markup.
	do(t, ctx, "open the dead letters",
		chromedp.Navigate(web.URL+"/dead?queue=emails"),
		chromedp.WaitVisible(chromedp.ID("dead")),
	)
	if n := eval[int](t, ctx, `document.querySelectorAll('#dead tbody td.id a').length`); n != seeded.Dead {
		t.Fatalf("the dead list shows %d jobs, want %d", n, seeded.Dead)
	}
	do(t, ctx, "open the dead job",
		chromedp.Click(chromedp.CSS(`#dead a[href$="id=`+seeded.XSSID+`"]`)),
		chromedp.WaitVisible(chromedp.ID("redrive")),
	)
	if p := text(t, ctx, "payload"); !strings.Contains(p, xssSubject) {
		t.Fatalf("payload shows %q, want the subject %s as text", p, xssSubject)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#payload script, main script').length`); n != 0 {
		t.Fatalf("the payload became %d script elements", n)
	}
	if e := text(t, ctx, "error"); e == "" {
		t.Fatal("no error shown")
	}

	// Redrive: back to the list, which no longer has it; a worker runs it.
	do(t, ctx, "redrive",
		chromedp.Click(chromedp.ID("redrive")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if n := eval[int](t, ctx, `document.querySelectorAll('#dead tbody td.id a').length`); n != seeded.Dead-1 {
		t.Fatalf("after redrive the dead list shows %d jobs, want %d", n, seeded.Dead-1)
	}
	if eval[bool](t, ctx, `!!document.querySelector('#dead a[href$="id=`+seeded.XSSID+`"]')`) {
		t.Fatal("the redriven job is still in the dead list")
	}
	select {
	case id := <-handled:
		if id != seeded.XSSID {
			t.Fatalf("the worker handled %q, want the redriven %q", id, seeded.XSSID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no worker handled the redriven job within 30s")
	}

	// Delete another dead job through the confirmation dialog.
	victim := seeded.DeadIDs[0]
	do(t, ctx, "open another dead job",
		chromedp.Navigate(web.URL+"/dead/emails/job?id="+victim),
		chromedp.WaitVisible(chromedp.ID("delete")),
		chromedp.Click(chromedp.ID("delete")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if got := dlg.seen(); len(got) != 1 || !strings.Contains(got[0], "Delete this dead job") {
		t.Fatalf("dialogs seen: %q, want the one confirmation", got)
	}
	if _, err := deadletter.New(b).Get(context.Background(), "emails", victim); err == nil {
		t.Fatal("the deleted job is still dead")
	}
	pauseAndResume(t, ctx, b, web.URL, handled)
	do(t, ctx, "back to the overview",
		chromedp.Navigate(web.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("total-dead")),
	)
	if got := text(t, ctx, "total-dead"); got != itoa(seeded.Dead-2) {
		t.Fatalf("overview shows %s dead after one redrive and one delete, want %d", got, seeded.Dead-2)
	}

	// Auto-refresh: a job enqueued now shows up without a reload.
	if err := b.Enqueue(context.Background(), &job.Envelope{ID: "late-comer", Queue: "emails", Type: "email.send", Payload: []byte(`{}`), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	want := itoa(seeded.Scheduled + 1)
	deadline := time.Now().Add(3 * refreshInterval)
	// Read in one script: the refresh may swap the element between a
	// query for the node and a read of its text.
	scheduled := func() string {
		return strings.TrimSpace(eval[string](t, ctx, `(document.getElementById('total-scheduled') || {}).innerText || ''`))
	}
	for scheduled() != want {
		if time.Now().After(deadline) {
			t.Fatalf("#total-scheduled still shows %s, not %s, after %v of auto-refresh", scheduled(), want, 3*refreshInterval)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if eval[string](t, ctx, `document.body.getAttribute('data-refreshed') || ''`) == "" {
		t.Fatal("the count changed without the refresh script running")
	}

	freshCharts(t, ctx, b, web.URL)
	rebinding(t, ctx, b, web.URL, attacker, seeded.Dead-2)
	cancelRunning(t, ctx, b, web.URL, &dlg, stopped)
	finishedJob(t, ctx, b, web.URL, attacker, release)
	heldBack(t, ctx, b, web.URL)
	deadTrimmed(t, ctx, rdb)
	periodicPauseAndRun(t, ctx, b, web.URL)
}

// deadTrimmed: a queue of another namespace, whose dead-letter store keeps
// 100 records (DeadCap), received 250 deaths: its page in the browser says
// 100 dead, and that 150 more were trimmed by the cap.
func deadTrimmed(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	t.Helper()
	b, err := broker.New(rdb, broker.Options{Namespace: "trimmed", DeadCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		id := "sms-" + strconv.Itoa(i)
		if err := b.Enqueue(ctx, &job.Envelope{ID: id, Queue: "sms", Type: "sms.send", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := testkit.Drive(b).Claim(ctx, "sms", 250, time.Minute)
	if err != nil || len(res.Jobs) != 250 {
		t.Fatalf("claimed %d of 250: %v", len(res.Jobs), err)
	}
	for _, c := range res.Jobs {
		rec := &job.DeadRecord{Type: "sms.send", Body: c.Body, Error: "gateway refused", Attempts: c.Attempt}
		if _, err := testkit.Drive(b).Kill(ctx, c.Lease, rec); err != nil {
			t.Fatal(err)
		}
	}
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	t.Cleanup(web.Close)
	do(t, ctx, "open the page of a queue whose dead letters were trimmed",
		chromedp.Navigate(web.URL+"/queues/sms"), chromedp.WaitVisible(chromedp.ID("q-dead-trimmed")))
	if got := text(t, ctx, "q-dead"); got != "100" {
		t.Errorf("dead card reads %q, want 100", got)
	}
	if got := text(t, ctx, "q-dead-trimmed"); !strings.Contains(got, "more were trimmed: 150 by the cap, 0 by age") {
		t.Errorf("trimmed line reads %q", got)
	}
}

// heldBack starts a worker for "sms" whose handlers run until the test
// ends, sets a rate limit of sms.send and a cap of report.build with the
// queue page's forms, and enqueues more jobs of each than they allow: the
// processes page lists the live workers, and the queue page's
// auto-refresh shows how many jobs each control holds back.
func heldBack(t *testing.T, ctx context.Context, b *broker.Broker, base string) {
	t.Helper()
	bg := context.Background()
	// The queue exists before its controls are set: a job due in a day.
	if err := b.Enqueue(bg, &job.Envelope{ID: "tomorrow", Queue: "sms", Type: "sms.send", Payload: []byte(`{}`), Delay: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 16)
	reg := job.NewRegistry()
	for _, typ := range []string{"sms.send", "report.build"} {
		job.New[email](typ, job.Queue("sms")).Handle(reg, func(ctx context.Context, j *job.Job[email]) error {
			started <- j.ID
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: "sms"}}, Concurrency: 8, MaxIdle: time.Second, Logger: &logger})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	// The processes page lists both live workers with their queues.
	do(t, ctx, "open the processes page",
		chromedp.Navigate(base+"/processes"),
		chromedp.WaitVisible(chromedp.ID("processes")),
	)
	for deadline := time.Now().Add(4 * refreshInterval); ; time.Sleep(100 * time.Millisecond) {
		rows := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#processes tr[data-role="worker"]')).map(r => r.innerText)`)
		var emails, sms bool
		for _, r := range rows {
			emails = emails || strings.Contains(r, "emails")
			sms = sms || strings.Contains(r, "sms") && strings.Contains(r, "report.build")
		}
		if emails && sms {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the processes page lists %q, want the workers of emails and of sms", rows)
		}
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshotAs(t, "dashboard-processes.png", shot)

	// Set the limit and the cap with the page's forms.
	do(t, ctx, "set a rate limit",
		chromedp.Navigate(base+"/queues/sms"),
		chromedp.WaitVisible(chromedp.ID("limit-form")),
		chromedp.SendKeys(chromedp.CSS(`#limit-form input[name="type"]`), "sms.send"),
		chromedp.SendKeys(chromedp.CSS(`#limit-form input[name="count"]`), "2"),
		chromedp.SendKeys(chromedp.CSS(`#limit-form input[name="per"]`), "1h"),
		chromedp.SendKeys(chromedp.CSS(`#limit-form input[name="burst"]`), "2"),
		chromedp.Click(chromedp.ID("set-limit")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if f := eval[string](t, ctx, `document.querySelector('.flash').innerText`); !strings.Contains(f, "Rate limit of") {
		t.Fatalf("after setting the limit the page says %q", f)
	}
	do(t, ctx, "set a cap",
		chromedp.SendKeys(chromedp.CSS(`#cap-form input[name="type"]`), "report.build"),
		chromedp.SendKeys(chromedp.CSS(`#cap-form input[name="n"]`), "1"),
		chromedp.Click(chromedp.ID("set-cap")),
		chromedp.WaitVisible(chromedp.ID("caps-note")),
	)
	st, err := testkit.OneStats(b.Stats(bg, "sms"))
	if err != nil || st.RateLimits["sms.send"] != (job.RateLimit{Count: 2, Per: time.Hour, Burst: 2}) || st.Caps["report.build"] != 1 {
		t.Fatalf("stored controls: %+v %+v, %v", st.RateLimits, st.Caps, err)
	}

	// Five sms and three reports: two sms and one report start, the rest
	// are held back, and the open page says so without a reload.
	var envs []*job.Envelope
	for i := range 5 {
		envs = append(envs, &job.Envelope{ID: "sms-" + itoa(i), Queue: "sms", Type: "sms.send", Payload: []byte(`{}`)})
	}
	for i := range 3 {
		envs = append(envs, &job.Envelope{ID: "report-" + itoa(i), Queue: "sms", Type: "report.build", Payload: []byte(`{}`)})
	}
	if err := b.Enqueue(bg, envs...); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the sms worker did not start three jobs within 30s")
		}
	}
	held := func() string {
		return strings.TrimSpace(eval[string](t, ctx, `(document.getElementById('q-held') || {}).innerText || ''`))
	}
	for deadline := time.Now().Add(4 * refreshInterval); held() != "5"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("#q-held shows %q, not 5; the page shows:\n%s", held(), eval[string](t, ctx, `document.querySelector('main').innerText`))
		}
	}
	why := eval[string](t, ctx, `document.getElementById('held-why').innerText`)
	for _, want := range []string{"3 held by the rate limit of sms.send (2 per 1h, burst 2)", "2 held by the concurrency cap of report.build (at most 1 running)"} {
		if !strings.Contains(why, want) {
			t.Errorf("the held-back list %q lacks %q", why, want)
		}
	}
	if due := text(t, ctx, "q-due"); due != "3" {
		t.Errorf("#q-due shows %q, want the 3 sms held by the limit", due)
	}
	select {
	case id := <-started:
		t.Fatalf("%s started past its limit or cap", id)
	default:
	}
	shot, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshotAs(t, "dashboard-held.png", shot)
}

// finishedJob opens the page of a running job: while the dashboard cannot
// be reached its refresh fails and the page says its data is stale; once
// the job finished (not retained, so the refresh gets a 404) the page says
// it is gone, drops its cancel button and stops refreshing.
func finishedJob(t *testing.T, ctx context.Context, b *broker.Broker, base string, rb *rebinder, release chan struct{}) {
	t.Helper()
	if err := b.Enqueue(context.Background(), &job.Envelope{ID: "held-1", Queue: "emails", Type: "email.hold", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := b.Job(context.Background(), "emails", "held-1")
		if err == nil && info.State == job.StateProcessing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("held-1 not running within 30s: %+v, %v", info, err)
		}
	}
	do(t, ctx, "open the running job",
		chromedp.Navigate(base+"/queues/emails/job?id=held-1"),
		chromedp.WaitVisible(chromedp.ID("cancel-running")),
	)
	waitFor := func(what, js string) {
		t.Helper()
		for deadline := time.Now().Add(4 * refreshInterval); !eval[bool](t, ctx, js); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; the page shows:\n%s", what, 4*refreshInterval, eval[string](t, ctx, `document.querySelector('main').innerText`))
			}
		}
	}

	// The dashboard answers 503 for a while: the page says it is stale.
	rb.failing.Store(true)
	waitFor("the stale notice", `(document.getElementById('refresh-status')||{}).dataset?.kind === 'bad stale'`)
	if s := text(t, ctx, "refresh-status"); !strings.Contains(s, "HTTP 503") || !strings.Contains(s, "may be stale") {
		t.Errorf("stale notice: %q", s)
	}
	rb.failing.Store(false)
	waitFor("the stale notice gone after a good refresh", `!document.getElementById('refresh-status')`)

	// The job finishes and is not retained: the refresh gets a 404.
	close(release)
	waitFor("the gone notice", `(document.getElementById('refresh-status')||{}).dataset?.kind === 'bad gone'`)
	if s := text(t, ctx, "refresh-status"); !strings.Contains(s, "no longer here") {
		t.Errorf("gone notice: %q", s)
	}
	if eval[bool](t, ctx, `!!document.getElementById('cancel-running') || !!document.querySelector('[data-actions]')`) {
		t.Error("the finished job's page still offers its actions")
	}
	if !eval[bool](t, ctx, `document.getElementById('live').classList.contains('is-gone')`) {
		t.Error("the finished job's facts are not marked as gone")
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshotAs(t, "dashboard-job-gone.png", shot)
	// It stops refreshing: no more stale notice or swap after that.
	refreshed := eval[string](t, ctx, `document.body.getAttribute('data-refreshed') || ''`)
	time.Sleep(2 * refreshInterval)
	if got := eval[string](t, ctx, `document.body.getAttribute('data-refreshed') || ''`); got != refreshed {
		t.Error("the page of a job that is gone kept refreshing")
	}
}

// pauseAndResume pauses the emails queue with its button: the badge shows,
// and a job due meanwhile is not handled; the resume button lets the
// worker handle it.
func pauseAndResume(t *testing.T, ctx context.Context, b *broker.Broker, base string, handled <-chan string) {
	t.Helper()
	do(t, ctx, "pause the queue",
		chromedp.Navigate(base+"/queues/emails"),
		chromedp.WaitVisible(chromedp.ID("pause-queue")),
		chromedp.Click(chromedp.ID("pause-queue")),
		chromedp.WaitVisible(chromedp.ID("paused-badge")),
	)
	if f := eval[string](t, ctx, `document.querySelector('.flash').innerText`); !strings.Contains(f, "paused") {
		t.Fatalf("flash after the pause: %q", f)
	}
	if err := b.Enqueue(context.Background(), &job.Envelope{ID: "while-paused", Queue: "emails", Type: "email.send", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// The worker sleeps at most MaxIdle (1s) between claims: give it a few.
	time.Sleep(3 * time.Second)
	select {
	case id := <-handled:
		t.Fatalf("the worker handled %q while the queue was paused", id)
	default:
	}
	if st, err := testkit.OneStats(b.Stats(context.Background(), "emails")); err != nil || !st.Paused || st.Due < 1 {
		t.Fatalf("stats while paused: %+v, %v", st, err)
	}
	do(t, ctx, "resume the queue",
		chromedp.Click(chromedp.ID("resume-queue")),
		chromedp.WaitVisible(chromedp.ID("pause-queue")),
	)
	select {
	case id := <-handled:
		if id != "while-paused" {
			t.Fatalf("after the resume the worker handled %q, want while-paused", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no worker handled the job within 30s of the resume")
	}
}

// cancelRunning cancels a job while a worker runs it, from its page: the
// confirmation dialog, the notice, and the handler stopped with cause
// broker.ErrCancelled.
func cancelRunning(t *testing.T, ctx context.Context, b *broker.Broker, base string, dlg *dialogs, stopped <-chan error) {
	t.Helper()
	if err := b.Enqueue(context.Background(), &job.Envelope{ID: "slow-1", Queue: "emails", Type: "email.slow", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := b.Job(context.Background(), "emails", "slow-1")
		if err == nil && info.State == job.StateProcessing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slow-1 not running within 30s: %+v, %v", info, err)
		}
	}
	before := len(dlg.seen())
	do(t, ctx, "cancel the running job",
		chromedp.Navigate(base+"/queues/emails/job?id=slow-1"),
		chromedp.WaitVisible(chromedp.ID("cancel-running")),
		chromedp.Click(chromedp.ID("cancel-running")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if got := dlg.seen(); len(got) != before+1 || !strings.Contains(got[before], "Cancel this running job") {
		t.Fatalf("dialogs seen: %q, want the confirmation of the cancel", got)
	}
	if f := eval[string](t, ctx, `document.querySelector('.flash').innerText`); !strings.Contains(f, "cancelled while it ran") {
		t.Fatalf("flash after the cancel: %q", f)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, broker.ErrCancelled) {
			t.Fatalf("the handler stopped with %v, want broker.ErrCancelled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the running job's handler was not cancelled within 30s")
	}
}

// freshCharts opens the page of a queue with nothing in its last hour: the
// y axes of its two charts read "0, 1, 2" and "0, 1ms, 2ms", bottom to top,
// each label drawn higher than the one before.
func freshCharts(t *testing.T, ctx context.Context, b *broker.Broker, webURL string) {
	t.Helper()
	if err := b.Enqueue(context.Background(), &job.Envelope{ID: "first", Queue: "fresh", Type: "email.send", Payload: []byte(`{}`), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "open a fresh queue",
		chromedp.Navigate(webURL+"/queues/fresh"),
		chromedp.WaitVisible(chromedp.CSS("svg.chart")),
	)
	type label struct {
		Text string  `json:"text"`
		Top  float64 `json:"top"`
	}
	axes := eval[[][]label](t, ctx, `[...document.querySelectorAll('svg.chart')].map(svg =>
		[...svg.querySelectorAll('text.axis[text-anchor="end"]')].map(e => ({text: e.textContent, top: e.getBoundingClientRect().top})))`)
	want := [][]string{{"0", "1", "2"}, {"0", "1ms", "2ms"}}
	if len(axes) != len(want) {
		t.Fatalf("the fresh queue's page has %d charts, want %d", len(axes), len(want))
	}
	for i, axis := range axes {
		var got []string
		for j, l := range axis {
			got = append(got, l.Text)
			if j > 0 && l.Top >= axis[j-1].Top {
				t.Errorf("chart %d: label %q is drawn at %.1f, not above %q at %.1f", i, l.Text, l.Top, axis[j-1].Text, axis[j-1].Top)
			}
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("chart %d of a fresh queue labels its y axis %q, want %q", i, got, want[i])
		}
	}
}

// rebinder serves the dashboard, except for one request: the first one
// for rebindHost's attack page gets the attacker's page, as the
// attacker's own server answered it before the name was rebound to
// 127.0.0.1. From then on the page's requests, same-origin to the browser,
// reach the dashboard.
type rebinder struct {
	dashboard http.Handler
	failing   atomic.Bool // answer 503 to every request, as an unreachable dashboard behind a proxy
	mu        sync.Mutex
	page      string // the attack page, set by the test
	served    bool
}

func (rb *rebinder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rb.failing.Load() {
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
		return
	}
	rb.mu.Lock()
	attack := !rb.served && rb.page != "" && strings.HasPrefix(r.Host, rebindHost+":") && r.URL.Path == "/attack.html"
	if attack {
		rb.served = true
	}
	page := rb.page
	rb.mu.Unlock()
	if !attack {
		rb.dashboard.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, page)
}

// attackPage is what the attacker's page does once its name points at
// 127.0.0.1: read a dashboard page and take its CSRF token, read a static
// file, then post a purge of the dead letters of "emails" (with the token
// it found, or else the victim's token the test hands it), and report.
const attackPage = `<!doctype html><meta charset="utf-8"><title>cute cats</title><pre id="out"></pre>
<script>
(async () => {
  const out = {read: 0, token: "", sawData: false, stat: 0, purge: 0, errors: []};
  try {
    const r = await fetch("/dead?queue=emails", {credentials: "include"});
    out.read = r.status;
    const html = await r.text();
    const m = html.match(/name="csrf" value="([^"]+)"/);
    out.token = m ? m[1] : "";
    out.sawData = html.includes("email.send") || html.includes("emails");
  } catch (e) { out.errors.push("read: " + e); }
  try {
    out.stat = (await fetch("/static/dashboard.js")).status;
  } catch (e) { out.errors.push("static: " + e); }
  try {
    const body = new URLSearchParams({csrf: out.token || "VICTIM_TOKEN", confirmed: "yes"});
    const r = await fetch("/dead/emails/purge", {method: "POST", body: body, credentials: "include"});
    out.purge = r.status;
  } catch (e) { out.errors.push("purge: " + e); }
  document.getElementById("out").textContent = JSON.stringify(out);
  document.title = "done";
})();
</script>`

// rebinding plays a DNS-rebinding attack in the browser: the dashboard
// opened under the attacker's name is refused, and JavaScript on a page of
// that origin can neither read the dashboard nor purge its dead letters,
// even holding the victim's CSRF token.
func rebinding(t *testing.T, ctx context.Context, b *broker.Broker, webURL string, rb *rebinder, dead int) {
	t.Helper()
	port := webURL[strings.LastIndexByte(webURL, ':')+1:]
	evil := "http://" + rebindHost + ":" + port

	// The victim's own session on 127.0.0.1: its token, handed to the
	// attacker's script as if it had leaked.
	do(t, ctx, "open the dead letters as the victim",
		chromedp.Navigate(webURL+"/dead?queue=emails"),
		chromedp.WaitVisible(chromedp.ID("purge")),
	)
	token := eval[string](t, ctx, `document.querySelector('input[name="csrf"]').value`)
	if token == "" {
		t.Fatal("no CSRF token on the victim's page")
	}

	// The dashboard itself, opened under the attacker's name: refused.
	do(t, ctx, "open the dashboard as "+evil,
		chromedp.Navigate(evil+"/"),
		chromedp.WaitReady(chromedp.CSS("body")),
	)
	body := eval[string](t, ctx, `document.body.innerText`)
	if !strings.Contains(body, "421 misdirected request") || eval[bool](t, ctx, `!!document.getElementById('total-scheduled')`) {
		t.Fatalf("the dashboard under %s shows:\n%s", evil, body)
	}

	// The attacker's page, then its script against the rebound name.
	rb.mu.Lock()
	rb.page = strings.ReplaceAll(attackPage, "VICTIM_TOKEN", token)
	rb.mu.Unlock()
	do(t, ctx, "run the attacker's page",
		chromedp.Navigate(evil+"/attack.html"),
		chromedp.WaitReady(chromedp.ID("out")),
	)
	for deadline := time.Now().Add(30 * time.Second); eval[string](t, ctx, `document.title`) != "done"; {
		if time.Now().After(deadline) {
			t.Fatal("the attacker's script did not finish within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var got struct {
		Read    int      `json:"read"`
		Token   string   `json:"token"`
		SawData bool     `json:"sawData"`
		Stat    int      `json:"stat"`
		Purge   int      `json:"purge"`
		Errors  []string `json:"errors"`
	}
	report := text(t, ctx, "out")
	if err := json.Unmarshal([]byte(report), &got); err != nil {
		t.Fatalf("attack report %q: %v", report, err)
	}
	if got.Read != http.StatusMisdirectedRequest || got.Token != "" || got.SawData || got.Stat != http.StatusMisdirectedRequest ||
		got.Purge != http.StatusMisdirectedRequest || len(got.Errors) > 0 {
		t.Fatalf("the rebound page got %+v; want every request refused with 421 and nothing read", got)
	}
	st, err := testkit.OneStats(b.Stats(context.Background(), "emails"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != int64(dead) {
		t.Fatalf("after the attack emails has %d dead jobs, want the %d it had", st.Dead, dead)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// saveScreenshot writes the PNG to the test's temp dir, and to
// docs/dashboard.png when DELAYQ_UPDATE_SCREENSHOT=1.
func saveScreenshot(t *testing.T, png []byte) {
	t.Helper()
	saveScreenshotAs(t, "dashboard.png", png)
}

// saveScreenshotAs writes the PNG to the test's temp dir, and to docs/name
// when DELAYQ_UPDATE_SCREENSHOT=1.
func saveScreenshotAs(t *testing.T, name string, png []byte) {
	t.Helper()
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	paths := []string{filepath.Join(t.TempDir(), name)}
	if os.Getenv("DELAYQ_UPDATE_SCREENSHOT") == "1" {
		paths = append(paths, filepath.Join("..", "..", "docs", name))
	}
	for _, p := range paths {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
}
