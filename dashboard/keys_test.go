package dashboard_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
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
  <td class="rate">—</td>
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
	if ok, _ := protocol.Admin(tb.b).Known(tb.ctx, "nosuch"); ok {
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
  <td class="rate">—</td>
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

// keyControls is what the per-key controls of queue q hold in Redis (its
// controls hash with the default key cap and rate, the keys' own caps
// and rates, the held keys, the keys waiting for a token) and its
// schedule, to tell that a refused form changed nothing.
func (tb *testBundle) keyControls(t *testing.T, q string) string {
	t.Helper()
	controls := testkit.Key(t, tb.b, q, "controls")
	prefix := strings.TrimSuffix(controls, "controls")
	var b strings.Builder
	for _, h := range []string{controls, prefix + "keycaps", prefix + "keyrates"} {
		m, err := tb.rdb.HGetAll(tb.ctx, h).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "%s %s=%s\n", h, k, m[k])
		}
	}
	for _, z := range []string{prefix + "keyheld", prefix + "keywait", testkit.Key(t, tb.b, q, "scheduled")} {
		zs, err := tb.rdb.ZRangeWithScores(tb.ctx, z, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %v\n", z, zs)
	}
	return b.String()
}

// heldKey is key's entry of HeldKeys of q (Key "" when it is not listed),
// with the queue's.
func (tb *testBundle) heldKey(t *testing.T, q, key string) (broker.HeldKey, broker.HeldKeys) {
	t.Helper()
	hk, err := tb.b.HeldKeys(tb.ctx, q, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range hk.Keys {
		if k.Key == key {
			return k, hk
		}
	}
	return broker.HeldKey{}, hk
}

// claimedIDs claims up to 20 jobs of q and returns their ids, sorted.
func (tb *testBundle) claimedIDs(t *testing.T, q string) []string {
	t.Helper()
	var ids []string
	for _, c := range tb.claim(t, q, 20).Jobs {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestKeyCapsAndLimits: the queue page's forms set and clear the default
// cap and rate limit of every key and a key's own (a "key" field, empty
// for the default), each taking effect for the claims, with a notice; the
// keys table shows each key's rate (own or default) and the reason "rate"
// for a key waiting for a token, and the page the queue's defaults, with
// buttons to clear them. The forms pass the CSRF and read-only rules of
// every action; bad values are refused with 400 saying what is wrong, a
// queue never used with 404, and neither changes anything.
func TestKeyCapsAndLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	typ := job.New[struct{}]("sms.send", job.Queue("sms"))
	for i := range 3 {
		for _, key := range []string{"acme", "beta"} {
			if _, err := typ.Enqueue(tb.ctx, tb.b, struct{}{}, job.ID(fmt.Sprintf("%c%d", key[0], i)), job.Key(key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := tb.get(t, "/queues/sms")
	mustContain(t, "queue page", r.body, `id="key-cap-form"`, `action="/queues/sms/keys/cap"`, `id="key-limit-form"`, `action="/queues/sms/keys/limit"`, `id="clear-key-limit-form"`)
	mustNotContain(t, "queue page without key controls", r.body, `id="keys"`, `id="clear-default-key-cap"`, `id="clear-default-key-limit"`)

	// Refused: without a token, cross-site, bad values, a queue never
	// used; nothing changes.
	before := tb.keyControls(t, "sms")
	wantStatus(t, "key cap without a token", tb.do(t, http.MethodPost, "/queues/sms/keys/cap", url.Values{"n": {"1"}}), http.StatusForbidden)
	wantStatus(t, "key limit without a token", tb.do(t, http.MethodPost, "/queues/sms/keys/limit", url.Values{"count": {"1"}, "per": {"1m"}}), http.StatusForbidden)
	wantStatus(t, "cross-site key cap", tb.post(t, "/queues/sms/keys/cap", url.Values{"n": {"1"}}, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), http.StatusForbidden)
	wantStatus(t, "cross-site key limit", tb.post(t, "/queues/sms/keys/limit", url.Values{"count": {"1"}, "per": {"1m"}}, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), http.StatusForbidden)
	wantStatus(t, "GET of the key cap action", tb.get(t, "/queues/sms/keys/cap"), http.StatusMethodNotAllowed)
	for _, c := range []struct {
		path string
		form url.Values
		want string
	}{
		{"/queues/sms/keys/cap", url.Values{"n": {"-1"}}, "The key cap must be a whole number"},
		{"/queues/sms/keys/cap", url.Values{"n": {"two"}}, "The key cap must be a whole number of running jobs per key, 0 to clear it, not &#34;two&#34;."},
		{"/queues/sms/keys/cap", url.Values{"n": {""}, "key": {"acme"}}, "The key cap must be a whole number"},
		{"/queues/sms/keys/cap", url.Values{"n": {"1"}, "key": {"a b"}}, "Bad key:"},
		{"/queues/sms/keys/cap", url.Values{"n": {"1"}, "key": {"a#b"}}, "Bad key:"},
		{"/queues/sms/keys/limit", url.Values{"count": {"0"}, "per": {"1s"}}, "count must be a positive whole number"},
		{"/queues/sms/keys/limit", url.Values{"count": {"10"}, "per": {"soon"}}, "period must be a duration of at least 1ms"},
		{"/queues/sms/keys/limit", url.Values{"count": {"10"}, "per": {"0s"}}, "period must be a duration of at least 1ms"},
		{"/queues/sms/keys/limit", url.Values{"count": {"10"}, "per": {"1s"}, "burst": {"-2"}}, "burst must be a whole number"},
		{"/queues/sms/keys/limit", url.Values{"count": {"4"}, "per": {"1m"}, "strict": {"1"}, "burst": {"3"}}, "strict rate limit with burst 3"},
		{"/queues/sms/keys/limit", url.Values{"count": {"4"}, "per": {"1m"}, "slack": {"1s"}}, "slack 1s without Strict"},
		{"/queues/sms/keys/limit", url.Values{"count": {"10"}, "per": {"1s"}, "key": {"a b"}}, "Bad key:"},
		{"/queues/sms/keys/limit", url.Values{"clear": {"1"}, "key": {"a\nb"}}, "Bad key:"},
	} {
		r := tb.post(t, c.path, c.form)
		wantStatus(t, fmt.Sprintf("POST %s %v", c.path, c.form), r, http.StatusBadRequest)
		mustContain(t, fmt.Sprintf("POST %s %v", c.path, c.form), r.body, c.want)
	}
	for _, path := range []string{"/queues/smss/keys/cap", "/queues/smss/keys/limit"} {
		r := tb.post(t, path, url.Values{"n": {"1"}, "count": {"1"}, "per": {"1m"}, "key": {"acme"}})
		wantStatus(t, "POST "+path, r, http.StatusNotFound)
		mustContain(t, "POST "+path, r.body, "nothing was ever enqueued to it")
	}
	if ok, _ := protocol.Admin(tb.b).Known(tb.ctx, "smss"); ok {
		t.Fatal("a key control on an unknown queue created it")
	}
	if after := tb.keyControls(t, "sms"); after != before {
		t.Fatalf("refused forms changed the key controls:\n%s\nto\n%s", before, after)
	}

	// The default key limit (strict 1 a minute) and beta's own (2 a
	// minute, burst 2), then a default key cap of 3 and acme's own of 1.
	r = tb.post(t, "/queues/sms/keys/limit", url.Values{"key": {""}, "count": {"1"}, "per": {"1m"}, "strict": {"1"}})
	wantStatus(t, "default key limit", r, http.StatusSeeOther)
	mustContain(t, "after the default key limit", tb.get(t, r.header.Get("Location")).body,
		"Default key rate limit of queue &#34;sms&#34; set to 1 starts per period per key across all workers; a key&#39;s own limit wins over it.")
	r = tb.post(t, "/queues/sms/keys/limit", url.Values{"key": {"beta"}, "count": {"2"}, "per": {"1m"}, "burst": {"2"}})
	wantStatus(t, "beta's limit", r, http.StatusSeeOther)
	mustContain(t, "after beta's limit", tb.get(t, r.header.Get("Location")).body, "Rate limit of key &#34;beta&#34; set to 2 starts per period across all workers")
	r = tb.post(t, "/queues/sms/keys/cap", url.Values{"n": {"3"}})
	wantStatus(t, "default key cap", r, http.StatusSeeOther)
	mustContain(t, "after the default key cap", tb.get(t, r.header.Get("Location")).body, "Default key cap of queue &#34;sms&#34; set to 3 running per key across all workers")
	r = tb.post(t, "/queues/sms/keys/cap", url.Values{"key": {" acme "}, "n": {"1"}})
	wantStatus(t, "acme's cap", r, http.StatusSeeOther)
	mustContain(t, "after acme's cap", tb.get(t, r.header.Get("Location")).body, "Concurrency cap of key &#34;acme&#34; set to 1 running across all workers")

	def := job.RateLimit{Count: 1, Per: time.Minute, Strict: true}
	if _, hk := tb.heldKey(t, "sms", ""); hk.DefaultCap != 3 || hk.DefaultRate != def {
		t.Fatalf("stored defaults: cap %d, rate %+v", hk.DefaultCap, hk.DefaultRate)
	}
	if ids := tb.claimedIDs(t, "sms"); !slices.Equal(ids, []string{"a0", "b0", "b1"}) {
		t.Fatalf("claimed %v, want acme's first (its cap 1, the default 1 a minute) and beta's first 2 (its own 2 a minute)", ids)
	}
	acme, _ := tb.heldKey(t, "sms", "acme")
	beta, _ := tb.heldKey(t, "sms", "beta")
	if acme.Held != 2 || acme.Cap != 1 || !acme.OwnCap || acme.Rate != def || acme.OwnRate || acme.Reason != "cap" ||
		beta.Held != 1 || beta.Cap != 3 || beta.OwnCap || beta.Rate.Count != 2 || beta.Rate.Burst != 2 || !beta.OwnRate || beta.Reason != "rate" {
		t.Fatalf("held keys: acme %+v, beta %+v", acme, beta)
	}
	r = tb.get(t, "/queues/sms")
	mustContain(t, "queue page with key controls", r.body,
		`id="key-defaults">Default per key across all workers (a key's own cap or limit wins): cap 3 running; rate limit 1 in any 1m, strict.</p>`,
		`<tr data-key="acme">
  <td class="id"><bdi>acme</bdi></td>
  <td class="r warn">2</td>
  <td class="r">1</td>
  <td class="r">1 (own)</td>
  <td class="rate">1 in any 1m, strict (default)</td>
  <td>at its cap</td>`,
		`<tr data-key="beta">
  <td class="id"><bdi>beta</bdi></td>
  <td class="r warn">1</td>
  <td class="r">2</td>
  <td class="r">3 (default)</td>
  <td class="rate">2 per 1m, burst 2 (own)</td>
  <td>rate limit: waiting for its next token</td>`,
		`<input type="hidden" name="key" value="acme"><input type="hidden" name="n" value="0"><button type="submit" class="small clear-key-cap">Clear own cap</button>`,
		`<input type="hidden" name="key" value="beta"><input type="hidden" name="clear" value="1"><button type="submit" class="small clear-key-limit">Clear own limit</button>`,
		`id="clear-default-key-cap"`, `id="clear-default-key-limit"`)
	mustNotContain(t, "queue page with key controls", r.body,
		`<input type="hidden" name="key" value="beta"><input type="hidden" name="n" value="0">`,
		`<input type="hidden" name="key" value="acme"><input type="hidden" name="clear" value="1">`)

	// Clearing: acme's own cap (the default 3 applies), beta's own limit
	// (the default applies; beta is paused meanwhile so that it stays
	// listed, as a cleared limit sends its held jobs back), then the
	// defaults; the held jobs run.
	r = tb.post(t, "/queues/sms/keys/cap", url.Values{"key": {"acme"}, "n": {"0"}})
	wantStatus(t, "clear acme's cap", r, http.StatusSeeOther)
	mustContain(t, "after clearing acme's cap", tb.get(t, r.header.Get("Location")).body, "Own concurrency cap of key &#34;acme&#34; cleared: the queue&#39;s default key cap applies to it.")
	if err := tb.b.PauseKey(tb.ctx, "sms", "beta"); err != nil {
		t.Fatal(err)
	}
	r = tb.post(t, "/queues/sms/keys/limit", url.Values{"key": {"beta"}, "clear": {"1"}})
	wantStatus(t, "clear beta's limit", r, http.StatusSeeOther)
	mustContain(t, "after clearing beta's limit", tb.get(t, r.header.Get("Location")).body, "Own rate limit of key &#34;beta&#34; cleared: the queue&#39;s default key rate limit applies to it.")
	// acme's cleared cap sent its held jobs back; the next claim holds
	// them again for want of a token of the default limit.
	if ids := tb.claimedIDs(t, "sms"); len(ids) != 0 {
		t.Fatalf("claimed %v with acme out of tokens and beta paused", ids)
	}
	acme, _ = tb.heldKey(t, "sms", "acme")
	beta, _ = tb.heldKey(t, "sms", "beta")
	if acme.Held != 2 || acme.OwnCap || acme.Cap != 3 || acme.Reason != "rate" || beta.Key != "beta" || beta.OwnRate || beta.Rate != def {
		t.Fatalf("after clearing the keys' own: acme %+v, beta %+v", acme, beta)
	}
	mustContain(t, "queue page with acme waiting for a token", tb.get(t, "/queues/sms").body, `<tr data-key="acme">
  <td class="id"><bdi>acme</bdi></td>
  <td class="r warn">2</td>
  <td class="r">1</td>
  <td class="r">3 (default)</td>
  <td class="rate">1 in any 1m, strict (default)</td>
  <td>rate limit: waiting for its next token</td>`)
	if _, err := tb.b.ResumeKey(tb.ctx, "sms", "beta"); err != nil {
		t.Fatal(err)
	}
	r = tb.post(t, "/queues/sms/keys/limit", url.Values{"key": {""}, "clear": {"1"}})
	wantStatus(t, "clear the default key limit", r, http.StatusSeeOther)
	mustContain(t, "after clearing the default key limit", tb.get(t, r.header.Get("Location")).body, "Default key rate limit of queue &#34;sms&#34; cleared")
	r = tb.post(t, "/queues/sms/keys/cap", url.Values{"n": {"0"}})
	wantStatus(t, "clear the default key cap", r, http.StatusSeeOther)
	mustContain(t, "after clearing the default key cap", tb.get(t, r.header.Get("Location")).body, "Default key cap of queue &#34;sms&#34; cleared")
	if _, hk := tb.heldKey(t, "sms", ""); hk.DefaultCap != 0 || hk.DefaultRate != (job.RateLimit{}) {
		t.Fatalf("defaults after clearing: %+v", hk)
	}
	if ids := tb.claimedIDs(t, "sms"); !slices.Equal(ids, []string{"a1", "a2", "b2"}) {
		t.Fatalf("claimed %v after every key control was cleared, want the 3 held", ids)
	}
	if after := tb.keyControls(t, "sms"); strings.Contains(after, "keycaps ") || strings.Contains(after, "keyrates ") {
		t.Errorf("own caps or limits left after clearing:\n%s", after)
	}
	mustNotContain(t, "queue page after clearing", tb.get(t, "/queues/sms").body, `id="keys"`, `id="clear-default-key-cap"`, `id="clear-default-key-limit"`)

	// Read-only: the defaults show, no form does, and a POST is refused.
	ro := setup(t, dashboard.Options{ReadOnly: true})
	if _, err := typ.Enqueue(ro.ctx, ro.b, struct{}{}, job.ID("x1"), job.Key("acme")); err != nil {
		t.Fatal(err)
	}
	if err := ro.b.SetKeyRateLimit(ro.ctx, "sms", "", job.RateLimit{Count: 5, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	r = ro.get(t, "/queues/sms")
	mustContain(t, "read-only queue page", r.body, `rate limit 5 per 1s.</p>`, `id="keys-none">No key holds jobs back now, and none is paused.</p>`)
	mustNotContain(t, "read-only queue page", r.body, `id="key-cap-form"`, `id="key-limit-form"`, `id="clear-default-key-limit"`)
	wantStatus(t, "read-only key limit", ro.do(t, http.MethodPost, "/queues/sms/keys/limit", url.Values{"clear": {"1"}}), http.StatusForbidden)
	wantStatus(t, "read-only key cap", ro.do(t, http.MethodPost, "/queues/sms/keys/cap", url.Values{"n": {"2"}}), http.StatusForbidden)
	if _, hk := ro.heldKey(t, "sms", ""); hk.DefaultRate.Count != 5 || hk.DefaultCap != 0 {
		t.Fatalf("a refused read-only form changed the defaults: %+v", hk)
	}
}

// TestKeyFairTurns: the queue page's fair-turns form says whether fair
// turns between keys are on (QueueStats.FairKeys) and offers the other
// state's button: off with On, on with Off. On ("on" = 1), the page says
// the turns are on before any key waits; a claim of 2 then takes one job
// of each key, the rest wait for their turn, and the keys table says so
// for each key ("fair turns: waiting for its turn"), with a line that the
// turns are on and how many keys wait; off ("on" = 0) sends them back to
// the schedule and the form offers On again. Each with a notice. A
// read-only page has no form but says the turns are on.
// The form passes the CSRF and read-only rules of every action; a bad
// "on" is refused with 400 saying what is wrong, a queue never used with
// 404, and neither changes anything.
func TestKeyFairTurns(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	typ := job.New[struct{}]("import.row", job.Queue("imports"))
	for i, key := range []string{"acme", "acme", "acme", "acme", "beta", "beta"} {
		if _, err := typ.Enqueue(tb.ctx, tb.b, struct{}{}, job.ID(fmt.Sprintf("%c%d", key[0], i)), job.Key(key)); err != nil {
			t.Fatal(err)
		}
	}
	// The form says what the switch is (Stats.FairKeys) and offers the
	// other state's button.
	offForm := func(step, body string) {
		t.Helper()
		mustContain(t, step, body, `action="/queues/imports/keys/fair" class="inline" id="key-fair-form"`,
			`<span id="key-fair-state">Fair turns between keys: off</span><button type="submit" name="on" value="1" class="small" id="key-fair-on">On</button></form>`)
		mustNotContain(t, step, body, `id="key-fair-off"`, `Fair turns between keys: on`, `id="keys-fair"`, `id="held-keys"`)
	}
	onForm := func(step, body string) {
		t.Helper()
		mustContain(t, step, body, `action="/queues/imports/keys/fair" class="inline" id="key-fair-form"`,
			`<span id="key-fair-state">Fair turns between keys: on</span><button type="submit" name="on" value="0" class="small" id="key-fair-off">Off</button></form>`)
		mustNotContain(t, step, body, `id="key-fair-on"`, `Fair turns between keys: off`)
	}
	r := tb.get(t, "/queues/imports")
	offForm("queue page with the turns off", r.body)

	// Refused: without a token, cross-site, a bad value, a queue never
	// used; nothing changes.
	before := tb.keyControls(t, "imports")
	wantStatus(t, "fair turns without a token", tb.do(t, http.MethodPost, "/queues/imports/keys/fair", url.Values{"on": {"1"}}), http.StatusForbidden)
	wantStatus(t, "cross-site fair turns", tb.post(t, "/queues/imports/keys/fair", url.Values{"on": {"1"}}, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), http.StatusForbidden)
	wantStatus(t, "GET of the fair-turns action", tb.get(t, "/queues/imports/keys/fair"), http.StatusMethodNotAllowed)
	for _, on := range []string{"", "yes", "on", "2", "true", "-1"} {
		r := tb.post(t, "/queues/imports/keys/fair", url.Values{"on": {on}})
		wantStatus(t, fmt.Sprintf("on=%q", on), r, http.StatusBadRequest)
		mustContain(t, fmt.Sprintf("on=%q", on), r.body, "Fair turns between keys are turned on with 1 or off with 0, not &#34;"+on+"&#34;.")
	}
	wantStatus(t, "no on field", tb.post(t, "/queues/imports/keys/fair", url.Values{}), http.StatusBadRequest)
	r = tb.post(t, "/queues/importz/keys/fair", url.Values{"on": {"1"}})
	wantStatus(t, "unused queue", r, http.StatusNotFound)
	mustContain(t, "unused queue", r.body, "nothing was ever enqueued to it")
	if ok, _ := protocol.Admin(tb.b).Known(tb.ctx, "importz"); ok {
		t.Fatal("fair turns on an unknown queue created it")
	}
	if after := tb.keyControls(t, "imports"); after != before {
		t.Fatalf("refused forms changed the key controls:\n%s\nto\n%s", before, after)
	}

	// On: a claim of 2 deals one job to each key; the rest wait for
	// their turn.
	r = tb.post(t, "/queues/imports/keys/fair", url.Values{"on": {"1"}})
	wantStatus(t, "fair turns on", r, http.StatusSeeOther)
	r = tb.get(t, r.header.Get("Location"))
	mustContain(t, "after turning the turns on", r.body,
		"Fair turns between keys on in queue &#34;imports&#34;: claims deal their room out among the keys with due jobs in turns, and a key&#39;s due jobs wait for its turn.")
	// On, no key waiting for its turn yet (no claim since): the page
	// says the turns are on all the same.
	onForm("queue page with the turns on, before a claim", r.body)
	mustContain(t, "queue page with the turns on, before a claim", r.body,
		`<p class="sub" id="keys-fair">Fair turns between keys are on: claims deal their room out among the keys with due jobs.</p>`,
		`id="keys-none">No key holds jobs back now, and none is paused.</p>`)
	mustNotContain(t, "queue page with the turns on, before a claim", r.body, `id="held-keys"`)
	var ids []string
	for _, c := range tb.claim(t, "imports", 2).Jobs {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a0", "b4"}) {
		t.Fatalf("a fair claim of 2 took %v, want a0 and b4 (one of each key)", ids)
	}
	if acme, _ := tb.heldKey(t, "imports", "acme"); acme.Held != 3 || !acme.WaitsForTurn || acme.Reason != "turn" {
		t.Fatalf("acme %+v, want 3 held waiting for its turn", acme)
	}
	r = tb.get(t, "/queues/imports")
	onForm("queue page with keys waiting for their turn", r.body)
	mustContain(t, "queue page with the turns on", r.body,
		`<p class="sub" id="keys-fair">Fair turns between keys are on: claims deal their room out among the keys with due jobs, and 2 of the keys listed wait for their turn.</p>`,
		`<tr data-key="acme">
  <td class="id"><bdi>acme</bdi></td>
  <td class="r warn">3</td>
  <td class="r">0</td>
  <td class="r">—</td>
  <td class="rate">—</td>
  <td>fair turns: waiting for its turn</td>`,
		`<tr data-key="beta">
  <td class="id"><bdi>beta</bdi></td>
  <td class="r warn">1</td>
  <td class="r">0</td>
  <td class="r">—</td>
  <td class="rate">—</td>
  <td>fair turns: waiting for its turn</td>`,
		"<li>4 held by their keys: a key&#39;s concurrency cap, pause or rate limit, or its wait for a fair turn (see the keys holding jobs back)</li>")
	// A key's weight in the turns shows beside its reason.
	if err := tb.b.SetKeyWeight(tb.ctx, "imports", "acme", 3); err != nil {
		t.Fatal(err)
	}
	r = tb.get(t, "/queues/imports")
	mustContain(t, "queue page with a weighted key", r.body,
		`<td>fair turns: waiting for its turn <span class="key-weight">(weight 3 in the fair turns)</span></td>`,
		`<td>fair turns: waiting for its turn</td>`)

	// Off: the jobs waiting for a turn go back to the schedule.
	r = tb.post(t, "/queues/imports/keys/fair", url.Values{"on": {" 0 "}})
	wantStatus(t, "fair turns off", r, http.StatusSeeOther)
	mustContain(t, "after turning the turns off", tb.get(t, r.header.Get("Location")).body,
		"Fair turns between keys off in queue &#34;imports&#34;: the jobs waiting for a turn went back to the schedule, claimed in ready order.")
	if st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "imports")); err != nil || st.HeldByKey != 0 || st.Held != 0 {
		t.Fatalf("after turning the turns off: %+v, %v; want nothing held", st, err)
	}
	offForm("queue page with the turns off again", tb.get(t, "/queues/imports").body)
	if ids := tb.claimedIDs(t, "imports"); !slices.Equal(ids, []string{"a1", "a2", "a3", "b5"}) {
		t.Fatalf("claimed %v after the turns were turned off, want the 4 that waited", ids)
	}

	// Read-only: no form, and a POST is refused.
	ro := setup(t, dashboard.Options{ReadOnly: true})
	if _, err := typ.Enqueue(ro.ctx, ro.b, struct{}{}, job.ID("x1"), job.Key("acme")); err != nil {
		t.Fatal(err)
	}
	mustNotContain(t, "read-only queue page", ro.get(t, "/queues/imports").body, `id="key-fair-form"`, `id="keys-fair"`)
	wantStatus(t, "read-only fair turns", ro.do(t, http.MethodPost, "/queues/imports/keys/fair", url.Values{"on": {"1"}}), http.StatusForbidden)
	if v, err := ro.rdb.HGet(ro.ctx, testkit.Key(t, ro.b, "imports", "controls"), "kf").Result(); v != "" || err == nil {
		t.Fatalf("a refused read-only form turned the turns on: %q, %v", v, err)
	}
	// Turned on by other means, a read-only page says so, with no form.
	if err := ro.b.SetKeyFairness(ro.ctx, "imports", true); err != nil {
		t.Fatal(err)
	}
	r = ro.get(t, "/queues/imports")
	mustContain(t, "read-only queue page with the turns on", r.body,
		`<p class="sub" id="keys-fair">Fair turns between keys are on: claims deal their room out among the keys with due jobs.</p>`)
	mustNotContain(t, "read-only queue page with the turns on", r.body, `id="key-fair-form"`, `id="key-fair-off"`)
}
