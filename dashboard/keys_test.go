package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/job"
)

// TestKeysHoldingJobsBack: the queue page lists the keys holding the most
// jobs back (held, running, cap own or default, why), with a pause or
// resume button per key and a form to pause any key, behind the CSRF and
// read-only rules of every action; a pause holds the key's jobs, a resume
// sends them back with a notice saying how many.
func TestKeysHoldingJobsBack(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	typ := job.New[struct{}]("import.row", job.Queue("imports"))
	for i, key := range []string{"acme", "acme", "acme", "beta", "beta", "gamma"} {
		if _, err := typ.Enqueue(tb.ctx, tb.b, struct{}{}, job.ID(fmt.Sprintf("r%d", i)), job.Key(key)); err != nil {
			t.Fatal(err)
		}
	}
	mustNotContain(t, "queue page without keys holding", tb.get(t, "/queues/imports").body, `id="held-keys"`)
	if err := tb.b.SetKeyConcurrency(tb.ctx, "imports", "", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "imports", "beta", 2); err != nil {
		t.Fatal(err)
	}
	if n := len(tb.claim(t, "imports", 20).Jobs); n != 4 {
		t.Fatalf("claimed %d, want 1 of acme, 2 of beta, 1 of gamma", n)
	}
	r := tb.get(t, "/queues/imports")
	mustContain(t, "queue page", r.body, `id="held-keys"`, `id="keys-holding">1 keys holding, 0 paused</span>`,
		`<tr data-key="acme">
  <td class="id"><bdi>acme</bdi></td>
  <td class="r warn">2</td>
  <td class="r">1</td>
  <td class="r">1 (default)</td>
  <td>at its cap</td>`, `<input type="hidden" name="key" value="acme"><button type="submit" class="small pause-key">Pause</button>`,
		`id="pause-key-form"`)

	// Without a token, or cross-site: refused, nothing paused.
	wantStatus(t, "pause without a token", tb.do(t, http.MethodPost, "/queues/imports/keys/pause", url.Values{"key": {"beta"}}), http.StatusForbidden)
	wantStatus(t, "cross-site pause", tb.post(t, "/queues/imports/keys/pause", url.Values{"key": {"beta"}}, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), http.StatusForbidden)
	if hk, err := tb.b.HeldKeys(tb.ctx, "imports", 10); err != nil || hk.PausedKeys != 0 {
		t.Fatalf("a refused pause paused a key: %+v, %v", hk, err)
	}
	wantStatus(t, "empty key", tb.post(t, "/queues/imports/keys/pause", url.Values{"key": {""}}), http.StatusBadRequest)
	wantStatus(t, "bad key", tb.post(t, "/queues/imports/keys/pause", url.Values{"key": {"a#b"}}), http.StatusBadRequest)
	wantStatus(t, "unused queue", tb.post(t, "/queues/nosuch/keys/pause", url.Values{"key": {"beta"}}), http.StatusNotFound)
	if ok, _ := tb.b.Known(tb.ctx, "nosuch"); ok {
		t.Fatal("a key pause on an unknown queue created it")
	}
	wantStatus(t, "GET of an action", tb.get(t, "/queues/imports/keys/pause"), http.StatusMethodNotAllowed)

	// Pause beta (nothing held): a new job of it is held by the pause.
	r = tb.post(t, "/queues/imports/keys/pause", url.Values{"key": {"beta"}})
	wantStatus(t, "pause", r, http.StatusSeeOther)
	mustContain(t, "after the pause", tb.get(t, r.header.Get("Location")).body, `Key &#34;beta&#34; paused in this queue: its due jobs are held until it is resumed.`)
	if _, err := typ.Enqueue(tb.ctx, tb.b, struct{}{}, job.ID("r9"), job.Key("beta")); err != nil {
		t.Fatal(err)
	}
	if n := len(tb.claim(t, "imports", 20).Jobs); n != 0 {
		t.Fatalf("claimed %d with beta paused and at caps", n)
	}
	r = tb.get(t, "/queues/imports")
	mustContain(t, "queue page with beta paused", r.body, `id="keys-holding">2 keys holding, 1 paused</span>`,
		`<tr data-key="beta">
  <td class="id"><bdi>beta</bdi></td>
  <td class="r warn">1</td>
  <td class="r">2</td>
  <td class="r">2 (own)</td>
  <td><span class="state s-paused">paused</span></td>`, `<input type="hidden" name="key" value="beta"><button type="submit" class="small resume-key">Resume</button>`)
	r = tb.post(t, "/queues/imports/keys/resume", url.Values{"key": {"beta"}})
	wantStatus(t, "resume", r, http.StatusSeeOther)
	mustContain(t, "after the resume", tb.get(t, r.header.Get("Location")).body, `Key &#34;beta&#34; resumed: 1 held jobs back on the schedule.`)
	if hk, err := tb.b.HeldKeys(tb.ctx, "imports", 10); err != nil || hk.PausedKeys != 0 {
		t.Fatalf("after the resume: %+v, %v", hk, err)
	}

	// Read-only: the table shows, no form does, and a POST is refused.
	ro := setup(t, dashboard.Options{ReadOnly: true})
	if _, err := typ.Enqueue(ro.ctx, ro.b, struct{}{}, job.ID("x1"), job.Key("acme")); err != nil {
		t.Fatal(err)
	}
	if err := ro.b.PauseKey(ro.ctx, "imports", "acme"); err != nil {
		t.Fatal(err)
	}
	ro.claim(t, "imports", 10)
	r = ro.get(t, "/queues/imports")
	mustContain(t, "read-only queue page", r.body, `id="held-keys"`, `<tr data-key="acme">`)
	mustNotContain(t, "read-only queue page", r.body, `id="pause-key-form"`, `class="small resume-key"`, `class="small pause-key"`)
	wantStatus(t, "read-only resume", ro.do(t, http.MethodPost, "/queues/imports/keys/resume", url.Values{"key": {"acme"}}), http.StatusForbidden)
	if hk, err := ro.b.HeldKeys(ro.ctx, "imports", 10); err != nil || hk.PausedKeys != 1 {
		t.Fatalf("a refused resume changed the pause: %+v, %v", hk, err)
	}
}
