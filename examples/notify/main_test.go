package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// scripted is a provider that answers with the status set for a phone
// number, and remembers the idempotency keys it delivered.
type scripted struct {
	mu     sync.Mutex
	status map[string]int
	keys   map[string]int
}

func (p *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msg struct{ To string }
	_ = decodeJSON(r, &msg)
	p.mu.Lock()
	defer p.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	switch st := p.status[msg.To]; {
	case p.keys[key] > 0:
		reply(w, http.StatusOK, "status", "duplicate")
	case st == http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "2")
		reply(w, st, "error", "rate limited")
	case st != 0:
		reply(w, st, "error", http.StatusText(st))
	default:
		p.keys[key]++
		reply(w, http.StatusOK, "status", "sent")
	}
}

// setup returns a Runner whose sender talks to a scripted provider.
func setup(t *testing.T, status map[string]int) (*delayqtest.Runner, *scripted) {
	t.Helper()
	p := &scripted{status: status, keys: map[string]int{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	users := &Directory{phones: map[string]string{
		"ok": "+15550101", "busy": "+15550102", "limited": "+15550103", "invalid": "+1555CALLME",
	}}
	s := &Sender{url: srv.URL, client: srv.Client(), users: users, clock: demo.NewClock(),
		sent: make(chan string, 16), failedAt: map[string]time.Time{}}
	reg := job.NewRegistry()
	SendReminder.Handle(reg, s.Handle)
	return &delayqtest.Runner{Registry: reg}, p
}

// The provider's answers steer the job: sent is a success, a 5xx backs
// off with the type's jittered policy, a 429 waits exactly its
// Retry-After, a 4xx and an unknown user are dead at once.
func TestProviderAnswersSteerRetries(t *testing.T) {
	rn, _ := setup(t, map[string]int{
		"+1555CALLME": http.StatusBadRequest, "+15550102": http.StatusServiceUnavailable, "+15550103": http.StatusTooManyRequests,
	})
	run := func(user string) *delayqtest.Result {
		t.Helper()
		res, err := delayqtest.Run(t.Context(), rn, SendReminder, Reminder{UserID: user, Text: "hi"}, job.ID("reminder-"+user))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	run("ok").RequireSuccess(t)
	run("busy").RequireRetry(t, 70*time.Millisecond, 130*time.Millisecond) // 100ms ±30 %
	run("limited").RequireRetryAfter(t, 2*time.Second)
	run("invalid").RequireDead(t, "provider rejected +1555CALLME: 400")
	run("nobody").RequireDead(t, "unknown user nobody")
}

// A retry after the SMS went out (the answer was lost) is recognised by
// its Idempotency-Key, the job id: the phone gets one SMS.
func TestRetrySendsOnce(t *testing.T) {
	rn, p := setup(t, nil)
	for range 2 {
		res, err := delayqtest.Run(t.Context(), rn, SendReminder, Reminder{UserID: "ok"}, job.ID("reminder-ok"))
		if err != nil {
			t.Fatal(err)
		}
		res.RequireSuccess(t)
	}
	if n := p.keys["reminder-ok"]; n != 1 {
		t.Errorf("delivered %d times, want once", n)
	}
}

// Retry-After takes seconds or an HTTP date; anything else means a second.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"3": 3 * time.Second, "0": 0, now.Add(5 * time.Second).Format(http.TimeFormat): 5 * time.Second,
		"": time.Second, "soon": time.Second, "-1": time.Second,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func decodeJSON(r *http.Request, v any) error { return json.NewDecoder(r.Body).Decode(v) }

// A login code expires 250ms after it was asked for: a sender that starts
// it later never sends it; one in time does.
func TestOTPExpires(t *testing.T) {
	e := &delayqtest.Enqueuer{}
	if _, err := SendOTP.Enqueue(t.Context(), e, OTP{UserID: "ok", Code: "1234"}); err != nil {
		t.Fatal(err)
	}
	otp := delayqtest.RequireEnqueuedN(t, e, SendOTP, 1, delayqtest.InQueue("sms"), delayqtest.ExpiresIn(250*time.Millisecond, 50*time.Millisecond))[0]

	p := &scripted{status: map[string]int{}, keys: map[string]int{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	s := &Sender{url: srv.URL, client: srv.Client(), users: &Directory{phones: map[string]string{"ok": "+15550101"}},
		clock: demo.NewClock(), sent: make(chan string, 4), failedAt: map[string]time.Time{}}
	reg := job.NewRegistry()
	SendOTP.Handle(reg, s.HandleOTP)

	inTime := &delayqtest.Runner{Registry: reg, Now: func() time.Time { return otp.CreatedAt.Add(100 * time.Millisecond) }}
	res, err := inTime.Attempt(t.Context(), otp.Envelope, 1)
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)

	late := &delayqtest.Runner{Registry: reg, Now: func() time.Time { return otp.CreatedAt.Add(300 * time.Millisecond) }}
	res, err = late.Attempt(t.Context(), otp.Envelope, 1)
	if err != nil {
		t.Fatal(err)
	}
	res.RequireDead(t, "expired, dropped")
	if n := len(p.keys); n != 1 {
		t.Errorf("%d codes delivered, want only the one in time", n)
	}
}

// A burst of 1,000 alerts under a fleet-wide strict limit of 200 in any
// second, to a gateway that answers 429 above 200 calls in any second:
// every alert is delivered, each on its first attempt, nothing is dead,
// and a 429 (a call that drifted past the limit's slack) is snoozed, never
// an attempt spent. (How fast is for the bench, not for a test.)
func TestBurstUnderRateLimit(t *testing.T) {
	t.Parallel()
	bd := testkit.Setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := sendBurst(ctx, bd.B, demo.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != burstSize || res.Snoozed != res.Limited || res.Retried != 0 || res.Dead != 0 {
		t.Errorf("burst: %d of %d delivered, %d answered 429 of which %d snoozed, %d attempts after the first, %d dead; want all delivered, every 429 snoozed, 0, 0",
			res.Delivered, burstSize, res.Limited, res.Snoozed, res.Retried, res.Dead)
	}
	st, err := testkit.OneStats(bd.B.Stats(ctx, SendAlert.Queue()))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.RateLimits[SendAlert.Name()]; got.Count != burstRate || got.Per != time.Second || !got.Strict || got.Slack != burstSlack {
		t.Errorf("rate limit of %s in Stats = %v, want %d in any 1s, strict, slack %v", SendAlert.Name(), got, burstRate, burstSlack)
	}
}

// A burst of chat messages per user becomes one SMS per user, with the
// count of the user's last message, no earlier than the debounce window
// after it.
func TestDigestsCoalesce(t *testing.T) {
	t.Parallel()
	bd := testkit.Setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	users := &Directory{phones: map[string]string{"u-3": "+15550103", "u-4": "+15550104"}}
	res, err := sendDigests(ctx, bd.B, users, demo.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, u := range digestMessages() {
		want[u]++
	}
	for u, n := range want {
		if got := res.Texts[u]; len(got) != 1 || got[0] != fmt.Sprintf("you have %d unread messages", n) {
			t.Errorf("%s received %q, want one SMS counting %d", u, got, n)
		}
		if res.Quiet[u] < digestWindow {
			t.Errorf("%s's SMS went out %v after their last message, before the window of %v", u, res.Quiet[u], digestWindow)
		}
	}
}

// Under a per-recipient limit of 1 SMS in any 400ms, u-1's 4 reminders
// due at once reach u-1's phone at least 400ms apart (by the provider's
// clock), u-2's reminder, due with them, is not held behind them, every
// reminder is received once, and while u-1's wait HeldKeys lists u-1, and
// only u-1, as held by its rate limit. It measures time at the phone, so
// it runs alone, not beside the parallel tests: beside the burst's 1,000
// alerts a call can come tens of ms after its claim, as much as the
// limit's slack.
func TestPerRecipientLimit(t *testing.T) {
	bd := testkit.Setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	users := &Directory{phones: map[string]string{"u-1": "+15550101", "u-2": "+15550102"}}
	res, err := limitPerRecipient(ctx, bd.B, users, demo.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, r := range recipientReminders {
		want[r.UserID] = append(want[r.UserID], r.Text)
	}
	for user, texts := range want {
		var got []string
		for _, d := range res.Received[user] {
			got = append(got, d.Text)
		}
		slices.Sort(got)
		slices.Sort(texts)
		if !slices.Equal(got, texts) {
			t.Errorf("%s received %q, want each of %q once", user, got, texts)
		}
	}
	u1 := res.Received["u-1"]
	for i := 1; i < len(u1); i++ {
		if gap := u1[i].At.Sub(u1[i-1].At); gap < recipientLimit.Per {
			t.Errorf("u-1's SMS %d came %v after the one before, under the limit's %v", i+1, gap, recipientLimit.Per)
		}
	}
	if u2 := res.Received["u-2"]; len(u2) > 0 {
		if wait := u2[0].At.Sub(res.Due); wait >= recipientLimit.Per {
			t.Errorf("u-2's reminder went out %v after it was due: held behind u-1's", wait)
		}
	}
	if len(res.Held) != 1 || res.Held[0].Key != "u-1" || res.Held[0].Held < 1 || res.Held[0].Reason != "rate" || res.Held[0].Rate != recipientLimit {
		t.Errorf("HeldKeys listed %+v; want u-1 alone, holding reminders back for want of a token (reason \"rate\", limit %v)", res.Held, recipientLimit)
	}
}
