package integration_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestBrowserKeys drives the queue page's keys table in headless Chromium
// against a real redis-server: a queue no worker serves, with a default
// key cap of 1, a rate limit of one key, and jobs of three keys claimed
// once, lists the keys holding jobs back with their cap and rate limit;
// the Pause button of a key pauses it (its row says so, with a Resume
// button) and Resume sends its held jobs back, with the count in the
// notice, and the key leaves the table. Then the key limit form sets the
// default rate limit of every key, which the page shows. Last, the
// fair-turns form, saying the turns are off with an On button only, turns
// fair turns between keys on: it then says on, with an Off button only,
// and a due job of a new key waits for its turn, which its row and the
// page say; Off sends it back to the schedule, the key leaves the table
// and the form says off with its On button again.
func TestBrowserKeys(t *testing.T) {
	// Light (one page, no timing): it runs with every package, also under
	// DELAYQ_BROWSER=later, which defers only TestBrowser.
	chrome := chromiumPath(t)
	if _, err := redistest.ServerBinary(); err != nil && os.Getenv("DELAYQ_REQUIRE_REDIS") != "1" {
		t.Skipf("the browser test needs a real server: %v", err)
	}
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
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
	ctx := browser(t, chrome)
	base := web.URL
	bg := context.Background()
	for i, key := range []string{"acme", "acme", "acme", "beta", "beta", "gamma"} {
		if err := b.Enqueue(bg, &job.Envelope{ID: fmt.Sprintf("row-%d", i), Queue: "imports", Type: "import.row", Payload: []byte(`{}`), Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetKeyConcurrency(bg, "imports", "", 1); err != nil {
		t.Fatal(err)
	}
	if err := b.SetKeyRateLimit(bg, "imports", "acme", job.RateLimit{Count: 5, Per: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if res, err := testkit.Drive(b).Claim(bg, "imports", 10, time.Hour); err != nil || len(res.Jobs) != 3 {
		t.Fatalf("claimed %d, want one of each key: %v", len(res.Jobs), err)
	}
	do(t, ctx, "open the queue page with keys holding jobs back",
		chromedp.Navigate(base+"/queues/imports"),
		chromedp.WaitVisible(chromedp.ID("held-keys")),
	)
	if got := text(t, ctx, "keys-holding"); got != "2 keys holding, 0 paused" {
		t.Fatalf("#keys-holding says %q", got)
	}
	row := eval[string](t, ctx, `document.querySelector('#held-keys tr[data-key="acme"]').innerText`)
	if !strings.Contains(row, "acme") || !strings.Contains(row, "2") || !strings.Contains(row, "at its cap") {
		t.Fatalf("acme's row: %q", row)
	}
	if rate := eval[string](t, ctx, `document.querySelector('#held-keys tr[data-key="acme"] td.rate').innerText`); strings.TrimSpace(rate) != "5 per 1m (own)" {
		t.Fatalf("acme's rate limit cell: %q", rate)
	}
	if rate := eval[string](t, ctx, `document.querySelector('#held-keys tr[data-key="beta"] td.rate').innerText`); strings.TrimSpace(rate) != "—" {
		t.Fatalf("beta's rate limit cell: %q, want — (none)", rate)
	}
	if got := text(t, ctx, "key-defaults"); !strings.Contains(got, "cap 1 running; rate limit none.") {
		t.Fatalf("#key-defaults says %q", got)
	}
	do(t, ctx, "pause acme from its row",
		chromedp.Click(chromedp.CSS(`#held-keys tr[data-key="acme"] button.pause-key`)),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
		chromedp.WaitVisible(chromedp.CSS(`#held-keys tr[data-key="acme"] button.resume-key`)),
	)
	if f := eval[string](t, ctx, `document.querySelector('.flash').innerText`); !strings.Contains(f, "acme") || !strings.Contains(f, "paused") {
		t.Fatalf("flash after the pause: %q", f)
	}
	if hk, err := b.HeldKeys(bg, "imports", 10); err != nil || hk.PausedKeys != 1 || hk.Keys[0].Key != "acme" || !hk.Keys[0].Paused {
		t.Fatalf("after the pause: %+v, %v", hk, err)
	}
	do(t, ctx, "resume acme from its row",
		chromedp.Click(chromedp.CSS(`#held-keys tr[data-key="acme"] button.resume-key`)),
	)
	// The new page's notice; acme, holding nothing any more, leaves the
	// table.
	flash := func() string {
		return eval[string](t, ctx, `(document.querySelector('.flash') || {}).innerText || ''`)
	}
	var f string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(f, "resumed:"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no notice of the resume within 10s: %q", f)
		}
		f = flash()
	}
	if !strings.Contains(f, "acme") || !strings.Contains(f, "2 held jobs back") {
		t.Fatalf("flash after the resume: %q", f)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#held-keys tr[data-key="acme"]').length`); n != 0 {
		t.Fatalf("acme still listed after its resume (%d rows)", n)
	}
	if hk, err := b.HeldKeys(bg, "imports", 10); err != nil || hk.PausedKeys != 0 {
		t.Fatalf("after the resume: %+v, %v", hk, err)
	}

	// The default key rate limit, from the key limit form (no key: the
	// default of every key).
	do(t, ctx, "set the default key rate limit",
		chromedp.SendKeys(chromedp.CSS(`#key-limit-form input[name="count"]`), "2"),
		chromedp.SendKeys(chromedp.CSS(`#key-limit-form input[name="per"]`), "1m"),
		chromedp.Click(chromedp.ID("set-key-limit")),
	)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(f, "Default key rate limit"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no notice of the default key limit within 10s: %q", f)
		}
		f = flash()
	}
	if got := text(t, ctx, "key-defaults"); !strings.Contains(got, "rate limit 2 per 1m.") {
		t.Fatalf("#key-defaults after the default key limit says %q", got)
	}
	if hk, err := b.HeldKeys(bg, "imports", 10); err != nil || hk.DefaultRate.Count != 2 || hk.DefaultRate.Per != time.Minute || hk.DefaultRate.Strict {
		t.Fatalf("after the default key limit: %+v, %v", hk, err)
	}

	// The fair-turns form says the turns are off, with an On button only.
	fairForm := func(step, state, button, gone string) {
		t.Helper()
		if got := text(t, ctx, "key-fair-state"); got != "Fair turns between keys: "+state {
			t.Fatalf("%s: #key-fair-state says %q, want %s", step, got, state)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll('#key-fair-form #`+button+`').length`); n != 1 {
			t.Fatalf("%s: %d #%s buttons, want 1", step, n, button)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll('#`+gone+`').length`); n != 0 {
			t.Fatalf("%s: a #%s button is shown", step, gone)
		}
	}
	fairForm("before fair turns", "off", "key-fair-on", "key-fair-off")

	// Fair turns between keys: on, from the On button.
	do(t, ctx, "turn fair turns between keys on",
		chromedp.Click(chromedp.ID("key-fair-on")),
	)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(f, "Fair turns between keys on"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no notice of fair turns on within 10s: %q", f)
		}
		f = flash()
	}
	if !strings.Contains(f, "imports") {
		t.Fatalf("flash after fair turns on: %q", f)
	}
	fairForm("after fair turns on", "on", "key-fair-off", "key-fair-on")
	// A due job of a new key goes straight to its key's held set, to wait
	// for its turn.
	if err := b.Enqueue(bg, &job.Envelope{ID: "row-delta", Queue: "imports", Type: "import.row", Payload: []byte(`{}`), Key: "delta"}); err != nil {
		t.Fatal(err)
	}
	if delta := heldKey(t, b, "delta"); delta.Held != 1 || !delta.WaitsForTurn || delta.Reason != "turn" {
		t.Fatalf("delta after fair turns on: %+v, want 1 held waiting for its turn", delta)
	}
	do(t, ctx, "open the queue page with delta waiting for its turn",
		chromedp.Navigate(base+"/queues/imports"),
		chromedp.WaitVisible(chromedp.CSS(`#held-keys tr[data-key="delta"]`)),
		chromedp.WaitVisible(chromedp.ID("keys-fair")),
	)
	if row := eval[string](t, ctx, `document.querySelector('#held-keys tr[data-key="delta"]').innerText`); !strings.Contains(row, "fair turns: waiting for its turn") {
		t.Fatalf("delta's row: %q", row)
	}
	if got := text(t, ctx, "keys-fair"); !strings.Contains(got, "Fair turns between keys are on") || !strings.Contains(got, "1 of the keys listed wait for their turn") {
		t.Fatalf("#keys-fair says %q", got)
	}
	// Off, from the Off button: delta's job is back on the schedule and
	// delta leaves the table.
	do(t, ctx, "turn fair turns between keys off",
		chromedp.Click(chromedp.ID("key-fair-off")),
	)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(f, "Fair turns between keys off"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no notice of fair turns off within 10s: %q", f)
		}
		f = flash()
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#held-keys tr[data-key="delta"], #keys-fair').length`); n != 0 {
		t.Fatalf("delta or the fair-turns line still shown after fair turns off (%d)", n)
	}
	fairForm("after fair turns off", "off", "key-fair-on", "key-fair-off")
	if delta := heldKey(t, b, "delta"); delta.Key != "" {
		t.Fatalf("delta after fair turns off: %+v, want not listed", delta)
	}
	if info, err := b.Job(bg, "imports", "row-delta"); err != nil || info.State != job.StateScheduled {
		t.Fatalf("delta's job after fair turns off: %+v, %v", info, err)
	}
}

// heldKey is key's entry of HeldKeys of queue imports (Key "" when it is
// not listed).
func heldKey(t *testing.T, b *broker.Broker, key string) broker.HeldKey {
	t.Helper()
	hk, err := b.HeldKeys(context.Background(), "imports", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range hk.Keys {
		if k.Key == key {
			return k
		}
	}
	return broker.HeldKey{}
}
