package dashboard_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/redistest"
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

// browser starts headless Chromium with a fresh profile and returns a tab's
// context; everything is stopped at cleanup.
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
// confirmation dialog, and a screenshot of the overview is saved (to
// docs/dashboard.png as well when DELAYQ_UPDATE_SCREENSHOT=1). CI sets
// DELAYQ_BROWSER=later for its parallel run of every package and runs this
// test alone afterwards.
func TestBrowser(t *testing.T) {
	if os.Getenv("DELAYQ_BROWSER") == "later" {
		t.Skip("DELAYQ_BROWSER=later: the browser test runs on its own later (.ci/run runs it at the end)")
	}
	chrome := chromiumPath(t)
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("DELAYQ_REQUIRE_REDIS") != "1" {
		t.Skip("redis-server not found on PATH: the browser test needs a real one")
	}
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	seeded := seedDemo(t, rdb, broker.DefaultNamespace)
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	t.Cleanup(web.Close)

	// A worker for "emails" reports the jobs it handles; nothing is due yet,
	// and the five processing jobs are leased to someone else for an hour.
	handled := make(chan string, 16)
	reg := job.NewRegistry()
	job.New[email]("email.send").Handle(reg, func(_ context.Context, j *job.Job[email]) error {
		handled <- j.ID
		return nil
	})
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	w, err := worker.New(worker.Config{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: "emails"}}, MaxIdle: time.Second, Logger: &logger})
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
	if _, err := b.DeadGet(context.Background(), "emails", victim); err == nil {
		t.Fatal("the deleted job is still dead")
	}
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
	deadline := time.Now().Add(3 * dashboard.DefaultRefreshInterval)
	for text(t, ctx, "total-scheduled") != want {
		if time.Now().After(deadline) {
			t.Fatalf("#total-scheduled still shows %s, not %s, after %v of auto-refresh", text(t, ctx, "total-scheduled"), want, 3*dashboard.DefaultRefreshInterval)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if eval[string](t, ctx, `document.body.getAttribute('data-refreshed') || ''`) == "" {
		t.Fatal("the count changed without the refresh script running")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// saveScreenshot writes the PNG to the test's temp dir, and to
// docs/dashboard.png when DELAYQ_UPDATE_SCREENSHOT=1.
func saveScreenshot(t *testing.T, png []byte) {
	t.Helper()
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	paths := []string{filepath.Join(t.TempDir(), "dashboard.png")}
	if os.Getenv("DELAYQ_UPDATE_SCREENSHOT") == "1" {
		paths = append(paths, filepath.Join("..", "docs", "dashboard.png"))
	}
	for _, p := range paths {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
}
