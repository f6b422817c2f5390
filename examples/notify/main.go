// Command notify sends delayed SMS reminders through a flaky provider: an
// HTTP server (httptest) that fails 30 % of calls, rate-limits with 429 and
// a Retry-After header, and rejects an invalid number with 400.
//
// It shows how a handler steers retries through the error it returns:
//
//   - a 5xx is an ordinary error: the job type's exponential backoff with
//     jitter decides when to try again;
//   - a 429 returns retry.After with the Retry-After delay, so the next
//     attempt comes exactly when the provider allows it;
//   - another 4xx (an invalid number) returns retry.Permanent: no retry can
//     fix it, so the job goes straight to the dead letters, where it is
//     listed with its error and redriven after the number is fixed.
//
// Every call carries the job id as its Idempotency-Key, so a retry after a
// response that was lost (the SMS went out, the 504 came back) does not send
// the SMS twice. The provider's failures come from a seeded random source.
//
// Last, a one-time login code that expires: asked for while no sender
// runs, it is dropped unsent once its 250ms are over (job.ExpireIn with
// job.DropExpired), and the code asked for next is sent.
//
// Then a digest: 23 chat messages for two users, each enqueuing its
// user's notification with job.Debounce, become one SMS per user, with the
// last count, sent once no message came for 300ms.
//
// Then a per-recipient limit: every reminder carries its recipient as its
// flow-control key (job.KeyFrom), and Broker.SetKeyRateLimit allows each
// recipient 1 SMS in any 400ms, strict, its window widened by a slack as
// the burst's below (1 in any 30 s in production). u-1 has 4 reminders due
// at once and u-2 one: u-2's goes out at once, not behind u-1's, while
// u-1's are held (pending, no attempt spent; Broker.HeldKeys lists u-1
// with reason "rate") and reach u-1's phone at least 400ms apart.
//
// Then a burst: 1,000 alerts due at once, to a gateway that takes at most
// 200 calls in any second and answers 429 above that. A fleet-wide strict
// limit of 200 in any second on the alert type (Broker.SetRateLimit with
// Strict, enforced in the claim, its window widened by a slack for the
// drift from claim to call) keeps the workers under it: every alert is
// delivered in about 5 s, each on its first attempt, and no dead letter.
// The limit bounds claims, not calls: a call that still meets a 429 (a
// handler that started late) snoozes until the Retry-After, spending no
// attempt. Without the limit, the workers would learn the gateway's limit
// from 429s.
//
//	go run ./examples/notify                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/notify
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// Reminder is the job's payload. It names the user, not the phone number:
// the handler looks the number up when it runs, so a corrected number is
// used by a redriven job.
type Reminder struct {
	UserID string `json:"user_id"`
	Text   string `json:"text"`
}

// SendReminder sends one SMS. Transient failures back off exponentially
// (100ms, 200ms, 400ms, … each ±30 %), at most 10 retries. Every reminder
// carries its recipient as its flow-control key, for a per-recipient limit
// (Broker.SetKeyRateLimit; see limitPerRecipient).
var SendReminder = job.New[Reminder]("sms.reminder",
	append([]job.TypeOption{job.KeyFrom(func(r Reminder) string { return r.UserID })}, smsRetries...)...)

// smsRetries are the options of a message that is worth retrying for a
// while: queue sms, at most 10 retries, each attempt 2s at most.
var smsRetries = []job.TypeOption{
	job.Queue("sms"),
	job.MaxRetries(10),
	job.Timeout(2 * time.Second),
	job.Retry(retry.Exponential{Initial: 100 * time.Millisecond, Multiplier: 2, Max: 2 * time.Second, Jitter: 0.3}),
}

// OTP is a one-time login code.
type OTP struct {
	UserID string `json:"user_id"`
	Code   string `json:"code"`
}

// SendOTP sends a login code. A code is worth sending for 250ms here (a
// few minutes in real life): one that no sender started by then is
// dropped at claim and counted (job.ExpireIn, job.DropExpired), never sent
// late, while the user has asked for a new one already.
var SendOTP = job.New[OTP]("sms.otp",
	job.Queue("sms"),
	job.ExpireIn(250*time.Millisecond),
	job.DropExpired(),
	job.Retry(retry.Exponential{Initial: 100 * time.Millisecond, Multiplier: 2, Max: 2 * time.Second, Jitter: 0.3}),
)

// Seeds of the providers' random failures: the reminders' gateway, and the
// login codes' one.
const seed, otpSeed = 7, 4

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "notify:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, where, closeRedis, err := demo.Redis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()
	b, err := broker.New(rdb, broker.Options{Namespace: "notify-" + job.NewID()})
	if err != nil {
		return err
	}
	clock := demo.NewClock()
	clock.Printf("using %s", where)

	provider := NewProvider(seed, 5, time.Second)
	srv := httptest.NewServer(provider)
	defer srv.Close()
	clock.Printf("provider: fails 30%% of calls (seed %d), accepts at most 5 calls a second, 400 for an invalid number", seed)

	users := &Directory{phones: map[string]string{
		"u-1": "+15550101", "u-2": "+15550102", "u-3": "+15550103", "u-4": "+15550104",
		"u-5": "+15550105", "u-6": "+1555CALLME", "u-7": "+15550107", "u-8": "+15550108",
	}}
	sender := &Sender{url: srv.URL + "/messages", client: srv.Client(), users: users, clock: clock,
		sent: make(chan string, 16), failedAt: make(map[string]time.Time)}
	reg := job.NewRegistry()
	SendReminder.Handle(reg, sender.Handle)
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: "sms"}}, Concurrency: 8})
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	// u-1 and u-6 in 100ms; the other six together in 300ms, a burst the
	// provider's rate limit will push back on.
	schedule := []struct {
		user string
		in   time.Duration
	}{{"u-1", 100 * time.Millisecond}, {"u-6", 100 * time.Millisecond}}
	for _, u := range []string{"u-2", "u-3", "u-4", "u-5", "u-7", "u-8"} {
		schedule = append(schedule, struct {
			user string
			in   time.Duration
		}{u, 300 * time.Millisecond})
	}
	for _, s := range schedule {
		_, err := SendReminder.Enqueue(ctx, b, Reminder{UserID: s.user, Text: "your appointment is tomorrow at 10:00"},
			job.ID("reminder-"+s.user), job.In(s.in))
		if err != nil {
			return err
		}
	}
	clock.Printf("scheduled 8 reminders: u-1 and u-6 in 100ms, u-2 u-3 u-4 u-5 u-7 u-8 together in 300ms")

	// u-6's number is invalid: its reminder is dead-lettered at once.
	dead := deadletter.New(b)
	var page deadletter.Page
	for len(page.Records) == 0 {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the dead letter: %w", err)
		}
		if page, err = dead.List(ctx, "sms", deadletter.ListOptions{Filter: deadletter.Filter{Type: SendReminder.Name()}}); err != nil {
			return err
		}
	}
	for _, r := range page.Records {
		clock.Printf("dead letter: %s after %d attempt(s): %s", r.ID, r.Attempts, r.Error)
	}
	users.Set("u-6", "+15550106")
	clock.Printf("u-6 corrected their number to +15550106")
	if err := dead.Redrive(ctx, "sms", 0, "reminder-u-6"); err != nil {
		return err
	}
	clock.Printf("redriven: reminder-u-6")

	for pending := len(schedule); pending > 0; {
		select {
		case <-sender.sent:
			pending--
		case <-ctx.Done():
			return fmt.Errorf("timed out with %d reminders unsent", pending)
		}
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return err
	}
	sts, err := b.Stats(context.Background(), "sms")
	if err != nil {
		return err
	}
	st := sts[0]
	c := provider.Counts()
	once := 0
	for _, n := range c.Inbox {
		if n == 1 {
			once++
		}
	}
	clock.Printf("provider saw %d calls: %d sent, %d duplicates recognised by Idempotency-Key, %d failed before sending (503), %d sent but the response was lost (504), %d rate-limited (429), %d rejected (400)",
		c.Calls, c.Sent, c.Duplicates, c.Unavailable, c.Lost, c.Limited, c.Rejected)
	clock.Printf("done: %d of %d reminders sent, %d of %d phones received exactly one SMS; queue: scheduled %d, processing %d, dead %d",
		len(c.Inbox), len(schedule), once, len(schedule), st.Scheduled, st.Processing, st.Dead)
	if err := sendOTPs(ctx, b, users, clock); err != nil {
		return err
	}
	if _, err := sendDigests(ctx, b, users, clock); err != nil {
		return err
	}
	if _, err := limitPerRecipient(ctx, b, users, clock); err != nil {
		return err
	}
	_, err = sendBurst(ctx, b, clock)
	return err
}

// sendOTPs shows a login code that expires: asked for while no sender
// runs, it is dropped unsent; the one asked for next is sent.
func sendOTPs(ctx context.Context, b *broker.Broker, users *Directory, clock *demo.Clock) error {
	gateway := httptest.NewServer(NewProvider(otpSeed, 10, time.Second))
	defer gateway.Close()
	sender := &Sender{url: gateway.URL + "/messages", client: gateway.Client(), users: users, clock: clock,
		sent: make(chan string, 4), failedAt: make(map[string]time.Time)}

	// The senders restart (no worker runs) when u-5 asks for a code.
	if _, err := SendOTP.Enqueue(ctx, b, OTP{UserID: "u-5", Code: "4711"}, job.ID("otp-u-5-1")); err != nil {
		return err
	}
	clock.Printf("u-5 asks for a login code while the senders restart; a code is worth sending for 250ms (job.ExpireIn)")
	if err := sleep(ctx, 400*time.Millisecond); err != nil {
		return err
	}
	reg := job.NewRegistry()
	SendOTP.Handle(reg, sender.HandleOTP)
	w, err := worker.New(worker.Options{Broker: b, Registry: reg}) // serves "sms", SendOTP's queue
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()
	clock.Printf("the senders are back; u-5, still waiting, asks again")
	if _, err := SendOTP.Enqueue(ctx, b, OTP{UserID: "u-5", Code: "0815"}, job.ID("otp-u-5-2")); err != nil {
		return err
	}
	select {
	case <-sender.sent:
	case <-ctx.Done():
		return errors.New("timed out waiting for the login code")
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return err
	}
	sts, err := b.Stats(context.Background(), SendOTP.Queue())
	if err != nil {
		return err
	}
	st := sts[0]
	clock.Printf("otp: the first code expired before a sender started it: dropped unsent (expired and dropped: %d); dead %d", st.ExpiredDropped, st.Dead)
	return nil
}

// Digest is a coalesced notification: how many chat messages wait for a
// user.
type Digest struct {
	UserID string `json:"user_id"`
	Unread int    `json:"unread"`
}

// SendDigest tells a user how many messages wait for them. Every new
// message enqueues it with job.Debounce("digest-"+user, digestWindow): a
// burst of messages becomes one SMS with the count of the last, sent once
// no message came for digestWindow. It retries like a reminder.
var SendDigest = job.New[Digest]("sms.digest", smsRetries...)

// digestWindow is how long a user's digest waits for another message.
const digestWindow = 300 * time.Millisecond

// DigestResult is what the digests came to.
type DigestResult struct {
	Texts map[string][]string      // user -> texts of the SMS delivered
	Quiet map[string]time.Duration // user -> from their last message to the SMS going out
}

// digestMessages is the chat traffic of the digest step: 20 messages for
// u-3 and 3 for u-4, interleaved, arriving as fast as they are enqueued.
func digestMessages() []string {
	var to []string
	for i := range 20 {
		to = append(to, "u-3")
		if i%7 == 0 {
			to = append(to, "u-4")
		}
	}
	return to
}

// sendDigests shows debounce: a burst of chat messages per user becomes one
// SMS per user, with the last count, digestWindow after the user's last
// message. The messages arrive while the senders restart (no worker runs),
// so the outcome is the same however slow the machine: a digest whose
// window closed before the next message gets that message's count too
// (job.Debounce gives a due job the newest arguments).
func sendDigests(ctx context.Context, b *broker.Broker, users *Directory, clock *demo.Clock) (DigestResult, error) {
	res := DigestResult{Texts: map[string][]string{}, Quiet: map[string]time.Duration{}}
	gateway := httptest.NewServer(NewProvider(seed, 10, time.Second))
	defer gateway.Close()
	unread := map[string]int{}
	last := map[string]time.Time{}
	msgs := digestMessages()
	for _, user := range msgs {
		unread[user]++
		last[user] = time.Now() // before the call: the window counts from the server's now, which is later
		d := Digest{UserID: user, Unread: unread[user]}
		if _, err := SendDigest.Enqueue(ctx, b, d, job.Debounce("digest-"+user, digestWindow)); err != nil {
			return res, err
		}
	}
	clock.Printf("digest: %d chat messages (u-3: %d, u-4: %d), each enqueuing its user's digest with job.Debounce(\"digest-<user>\", %v)",
		len(msgs), unread["u-3"], unread["u-4"], digestWindow)

	var mu sync.Mutex
	done := make(chan string, len(msgs)) // room for every run, however many
	reg := job.NewRegistry()
	SendDigest.Handle(reg, func(ctx context.Context, j *job.Job[Digest]) error {
		phone, ok := users.Phone(j.Args.UserID)
		if !ok {
			return retry.Permanent(fmt.Errorf("unknown user %s", j.Args.UserID))
		}
		text := fmt.Sprintf("you have %d unread messages", j.Args.Unread)
		// The id repeats from one burst to the next: the Idempotency-Key
		// adds the creation time of the envelope that runs.
		key := j.ID + "@" + strconv.FormatInt(j.CreatedAt.UnixMilli(), 10)
		status, retryAfter, answer, err := post(ctx, gateway.Client(), gateway.URL+"/messages", key, phone, text)
		switch {
		case err != nil:
			return err
		case status == http.StatusTooManyRequests:
			return retry.After(retryAfter, errors.New("provider: 429 rate-limited"))
		case status != http.StatusOK:
			return fmt.Errorf("provider: %d %s", status, answer)
		}
		// Sent now, or by an attempt whose answer was lost ("duplicate").
		mu.Lock()
		defer mu.Unlock()
		res.Texts[j.Args.UserID] = append(res.Texts[j.Args.UserID], text)
		res.Quiet[j.Args.UserID] = time.Since(last[j.Args.UserID])
		done <- j.Args.UserID
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: SendDigest.Queue()}}})
	if err != nil {
		return res, err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()
	for pending := len(unread); pending > 0; {
		select {
		case <-done:
			pending--
		case <-ctx.Done():
			stopWorker()
			<-workerDone
			return res, fmt.Errorf("digest: timed out with %d digests unsent", pending)
		}
	}
	// A second SMS to a user would come within a window; wait one more,
	// so that the result shows it.
	if err := sleep(ctx, digestWindow); err != nil {
		return res, err
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return res, err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, user := range []string{"u-3", "u-4"} {
		clock.Printf("digest %s: %d SMS %q, %dms after their last message", user, len(res.Texts[user]), res.Texts[user], res.Quiet[user].Milliseconds())
	}
	return res, nil
}

// recipientLimit is the per-recipient limit: at most 1 SMS per recipient
// in any 400ms (in production, e.g. 1 in any 30 s: a phone is not flooded,
// nor a number pumped), strict. The limit bounds claims: its window is
// widened, as the burst's, by a slack for the drift from claim to call
// (a few ms on one machine, tens under load), so that the phone too
// receives them at least 400ms apart.
var recipientLimit = job.RateLimit{Count: 1, Per: 400 * time.Millisecond, Strict: true, Slack: 50 * time.Millisecond}

// recipientReminders are the reminders of the limit step: 4 for u-1, due
// at the same moment as u-2's one.
var recipientReminders = []Reminder{
	{UserID: "u-1", Text: "your appointment is tomorrow at 10:00"},
	{UserID: "u-1", Text: "your prescription is ready for pickup"},
	{UserID: "u-1", Text: "your lab results are in"},
	{UserID: "u-1", Text: "your invoice is due on Friday"},
	{UserID: "u-2", Text: "your appointment is tomorrow at 11:30"},
}

// LimitResult is what the per-recipient limit came to.
type LimitResult struct {
	Received map[string][]Delivery // user -> the SMS their phone received, in order (the provider's log)
	Due      time.Time             // when the reminders were due
	Held     []broker.HeldKey      // the keys HeldKeys listed once two SMS had gone out (u-1's first, u-2's)
}

// limitPerRecipient shows a per-recipient limit: with recipientLimit set
// on the queue's keys (key "", the default of every recipient), u-1's 4
// reminders due at once go out one per window, and u-2's, due with them,
// goes out at once: a recipient without a token holds back only its own
// jobs. A limit on the type (SetRateLimit) would have held u-2's behind
// u-1's. The limit stays set, as one set at startup would; the alerts that
// follow carry no key, so it does not apply to them.
func limitPerRecipient(ctx context.Context, b *broker.Broker, users *Directory, clock *demo.Clock) (LimitResult, error) {
	res := LimitResult{Received: map[string][]Delivery{}}
	provider := NewProvider(seed, 10, time.Second)
	provider.fails = 0 // this gateway does not fail: every SMS goes out on its first call
	gateway := httptest.NewServer(provider)
	defer gateway.Close()
	if err := b.SetKeyRateLimit(ctx, SendReminder.Queue(), "", recipientLimit); err != nil {
		return res, err
	}
	sender := &Sender{url: gateway.URL + "/messages", client: gateway.Client(), users: users, clock: clock,
		sent: make(chan string, len(recipientReminders)), failedAt: make(map[string]time.Time)}
	reg := job.NewRegistry()
	SendReminder.Handle(reg, sender.Handle)
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: SendReminder.Queue()}}, Concurrency: 8})
	if err != nil {
		return res, err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	res.Due = time.Now().Add(100 * time.Millisecond)
	for i, r := range recipientReminders {
		if _, err := SendReminder.Enqueue(ctx, b, r, job.ID(fmt.Sprintf("reminder-%s-%d", r.UserID, i)), job.At(res.Due)); err != nil {
			return res, err
		}
	}
	clock.Printf("per-recipient limit: 4 reminders for u-1 and 1 for u-2, due at once in 100ms; each carries its recipient as its key (job.KeyFrom); limit per recipient: %v (Broker.SetKeyRateLimit)",
		recipientLimit)

	wait := func(n int) error {
		for ; n > 0; n-- {
			select {
			case <-sender.sent:
			case <-ctx.Done():
				stopWorker()
				<-workerDone
				return fmt.Errorf("per-recipient limit: timed out with %d reminders unsent", n)
			}
		}
		return nil
	}
	// u-1's first and u-2's go out at once; u-1's other three wait for
	// u-1's tokens.
	if err := wait(2); err != nil {
		return res, err
	}
	held, err := b.HeldKeys(ctx, SendReminder.Queue(), 10)
	if err != nil {
		return res, err
	}
	res.Held = held.Keys
	for _, k := range held.Keys {
		clock.Printf("held (Broker.HeldKeys): %s holds %d reminder(s) back, reason %q, limit %v", k.Key, k.Held, k.Reason, k.Rate)
	}
	if err := wait(len(recipientReminders) - 2); err != nil {
		return res, err
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return res, err
	}
	phones := map[string]string{}
	for _, r := range recipientReminders {
		phones[r.UserID], _ = users.Phone(r.UserID)
	}
	log := provider.Counts().Log
	for _, user := range []string{"u-1", "u-2"} {
		res.Received[user] = log[phones[user]]
		var at, apart []string
		for i, d := range res.Received[user] {
			at = append(at, fmt.Sprintf("+%dms", d.At.Sub(res.Due).Milliseconds()))
			if i > 0 {
				apart = append(apart, fmt.Sprintf("%dms", d.At.Sub(res.Received[user][i-1].At).Milliseconds()))
			}
		}
		line := fmt.Sprintf("per-recipient limit %s: %d SMS received, at %s from the due time", user, len(at), strings.Join(at, ", "))
		if len(apart) > 0 {
			line += fmt.Sprintf(" (%s apart)", strings.Join(apart, ", "))
		}
		clock.Printf("%s", line)
	}
	return res, nil
}

// Alert is one message of a burst, to one phone.
type Alert struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

// SendAlert sends one alert; it retries like a reminder.
var SendAlert = job.New[Alert]("sms.alert", smsRetries...)

// The burst: burstSize alerts due at once; the gateway takes burstRate
// calls a second, and so does the fleet-wide limit.
const burstSize, burstRate = 1000, 200

// burstSlack widens the strict window by the drift between a claim on the
// server and the handler's call reaching the gateway (reply, dispatch,
// HTTP request): a few ms on one machine, more under load.
const burstSlack = 25 * time.Millisecond

// BurstResult is what a burst came to.
type BurstResult struct {
	Delivered int           // alerts delivered (distinct phones with an SMS)
	Limited   int           // calls the gateway answered 429
	Snoozed   int           // of those, snoozed until the Retry-After (no attempt spent)
	Retried   int           // attempts after the first, of any alert
	Dead      int64         // dead letters of the queue afterwards
	Took      time.Duration // from the worker's start to the last delivery
}

// sendBurst sends burstSize alerts due at once through a gateway that takes
// burstRate calls in any second, under a fleet-wide strict limit of
// burstRate in any second on SendAlert set with SetRateLimit.
func sendBurst(ctx context.Context, b *broker.Broker, clock *demo.Clock) (BurstResult, error) {
	var res BurstResult
	provider := NewProvider(seed, burstRate, time.Second)
	provider.fails = 0 // this gateway fails only over its limit
	gateway := httptest.NewServer(provider)
	defer gateway.Close()
	limit := job.RateLimit{Count: burstRate, Per: time.Second, Strict: true, Slack: burstSlack}
	if err := b.SetRateLimit(ctx, SendAlert.Queue(), SendAlert.Name(), limit); err != nil {
		return res, err
	}
	for i := range burstSize {
		a := Alert{To: fmt.Sprintf("+1555%07d", i), Text: "storm warning: stay indoors"}
		if _, err := SendAlert.Enqueue(ctx, b, a, job.ID(fmt.Sprintf("alert-%04d", i))); err != nil {
			return res, err
		}
	}
	clock.Printf("burst: %d alerts due at once; the gateway takes %d calls a second (429 above); fleet-wide limit on %s: %v (Broker.SetRateLimit)",
		burstSize, burstRate, SendAlert.Name(), limit)

	s := &AlertSender{url: gateway.URL + "/messages", client: gateway.Client(), sent: make(chan string, burstSize)}
	reg := job.NewRegistry()
	SendAlert.Handle(reg, s.Handle)
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: SendAlert.Queue()}}, Concurrency: 16})
	if err != nil {
		return res, err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	start := time.Now()
	go func() { workerDone <- w.Run(workerCtx) }()
	for pending := burstSize; pending > 0; {
		select {
		case <-s.sent:
			pending--
		case <-ctx.Done():
			stopWorker()
			<-workerDone
			return res, fmt.Errorf("burst: timed out with %d alerts undelivered", pending)
		}
	}
	res.Took = time.Since(start)
	stopWorker()
	if err := <-workerDone; err != nil {
		return res, err
	}
	sts, err := b.Stats(context.Background(), SendAlert.Queue())
	if err != nil {
		return res, err
	}
	st := sts[0]
	c := provider.Counts()
	res.Delivered, res.Limited, res.Snoozed, res.Retried, res.Dead = len(c.Inbox), c.Limited, int(s.snoozed.Load()), int(s.retried.Load()), st.Dead
	clock.Printf("burst: %d of %d alerts delivered in %.1fs (%.0f/s, limit %d/s); gateway answered 429 %d times (snoozed %d); attempts after the first: %d; dead %d",
		res.Delivered, burstSize, res.Took.Seconds(), float64(burstSize)/res.Took.Seconds(), burstRate, res.Limited, res.Snoozed, res.Retried, res.Dead)
	return res, nil
}

// AlertSender is the handler of sms.alert. It counts the attempts after an
// alert's first (the rate limit spends none) and the snoozes on a 429.
type AlertSender struct {
	url     string
	client  *http.Client
	sent    chan string
	retried atomic.Int64
	snoozed atomic.Int64
}

// Handle sends one alert; a 429 snoozes until its Retry-After (the attempt
// is given back: being over the gateway's limit is no failure of the
// alert), any other failure backs off.
func (s *AlertSender) Handle(ctx context.Context, j *job.Job[Alert]) error {
	if j.Attempt > 1 {
		s.retried.Add(1)
	}
	status, retryAfter, answer, err := post(ctx, s.client, s.url, j.ID, j.Args.To, j.Args.Text)
	switch {
	case err != nil:
		return err
	case status == http.StatusTooManyRequests:
		s.snoozed.Add(1)
		return retry.Snooze(retryAfter)
	case status != http.StatusOK:
		return fmt.Errorf("provider: %d %s", status, answer)
	}
	s.sent <- j.ID
	return nil
}

// HandleOTP sends one login code, through the same answer handling as a
// reminder.
func (s *Sender) HandleOTP(ctx context.Context, j *job.Job[OTP]) error {
	err := s.Handle(ctx, &job.Job[Reminder]{Message: j.Message, Args: Reminder{UserID: j.Args.UserID, Text: "your login code is " + j.Args.Code}})
	if err == nil {
		s.clock.Printf("otp %s: login code %s delivered", j.Args.UserID, j.Args.Code)
	}
	return err
}

// Directory holds users' phone numbers.
type Directory struct {
	mu     sync.Mutex
	phones map[string]string
}

// Phone returns a user's number.
func (d *Directory) Phone(user string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.phones[user]
	return p, ok
}

// Set changes a user's number.
func (d *Directory) Set(user, phone string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.phones[user] = phone
}

// Sender is the handler of sms.reminder.
type Sender struct {
	url    string
	client *http.Client
	users  *Directory
	clock  *demo.Clock
	sent   chan string

	mu       sync.Mutex
	failedAt map[string]time.Time // job id -> when its last attempt failed
}

// Handle sends one reminder and maps the provider's answer to the outcome of
// the attempt.
func (s *Sender) Handle(ctx context.Context, j *job.Job[Reminder]) error {
	phone, ok := s.users.Phone(j.Args.UserID)
	if !ok {
		return retry.Permanent(fmt.Errorf("unknown user %s", j.Args.UserID))
	}
	who := fmt.Sprintf("sms %s attempt %d", j.Args.UserID, j.Attempt)
	if since, ok := s.sinceFailure(j.ID); ok {
		who += fmt.Sprintf(" (%dms after the last failure, lateness %dms)", since.Milliseconds(), j.Lateness().Milliseconds())
	} else {
		who += fmt.Sprintf(" (lateness %dms)", j.Lateness().Milliseconds())
	}
	status, retryAfter, answer, err := post(ctx, s.client, s.url, j.ID, phone, j.Args.Text)
	if err != nil {
		s.failed(j.ID)
		s.clock.Printf("%s: %v; retrying with backoff", who, err)
		return err
	}
	switch {
	case status == http.StatusOK && answer == "duplicate":
		s.clock.Printf("%s: already sent, the provider recognised the Idempotency-Key: not sent twice", who)
	case status == http.StatusOK:
		s.clock.Printf("%s: sent to %s", who, phone)
	case status == http.StatusTooManyRequests:
		s.failed(j.ID)
		s.clock.Printf("%s: 429 rate-limited, Retry-After %v: retry.After schedules the next attempt in exactly %v", who, retryAfter, retryAfter)
		return retry.After(retryAfter, errors.New("provider: 429 rate-limited"))
	case status >= 400 && status < 500:
		s.clock.Printf("%s: %d %s: permanent (retry.Permanent), no retry", who, status, answer)
		return retry.Permanent(fmt.Errorf("provider rejected %s: %d %s", phone, status, answer))
	default:
		s.failed(j.ID)
		s.clock.Printf("%s: %d %s; retrying with backoff", who, status, answer)
		return fmt.Errorf("provider: %d %s", status, answer)
	}
	s.sent <- j.ID
	return nil
}

func (s *Sender) failed(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failedAt[id] = time.Now()
}

func (s *Sender) sinceFailure(id string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.failedAt[id]
	return time.Since(t), ok
}

// post sends one SMS request; the job id is its idempotency key. It returns
// the status, the Retry-After delay of a 429 and the answer's text.
func post(ctx context.Context, client *http.Client, url, key, to, text string) (int, time.Duration, string, error) {
	body, _ := json.Marshal(map[string]string{"to": to, "text": text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	var answer struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	if resp.StatusCode == http.StatusTooManyRequests {
		return resp.StatusCode, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), answer.Error, nil
	}
	if answer.Error != "" {
		return resp.StatusCode, 0, answer.Error, nil
	}
	return resp.StatusCode, 0, answer.Status, nil
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
// A missing or malformed header gives one second.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return time.Second
}

// Provider is a flaky SMS gateway.
type Provider struct {
	mu     sync.Mutex
	rng    *rand.Rand
	limit  int
	per    time.Duration
	fails  float64         // share of calls let through that fail (half 503, half 504)
	recent []time.Time     // calls let through the rate limit in the last per
	keys   map[string]bool // idempotency keys of messages sent
	counts Counts
}

// Counts is what the provider saw.
type Counts struct {
	Calls, Sent, Duplicates, Unavailable, Lost, Limited, Rejected int
	Inbox                                                         map[string]int        // phone -> SMS received
	Log                                                           map[string][]Delivery // phone -> the SMS received, in order
}

// Delivery is one SMS a phone received: when the provider sent it, and
// its text.
type Delivery struct {
	At   time.Time
	Text string
}

// NewProvider returns a provider whose failures are drawn from seed and
// that lets at most limit calls through per period.
func NewProvider(seed uint64, limit int, per time.Duration) *Provider {
	return &Provider{
		rng:    rand.New(rand.NewPCG(seed, seed)),
		limit:  limit,
		per:    per,
		fails:  0.30,
		keys:   make(map[string]bool),
		counts: Counts{Inbox: make(map[string]int), Log: make(map[string][]Delivery)},
	}
}

var validPhone = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var msg struct{ To, Text string }
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		reply(w, http.StatusBadRequest, "error", "malformed request")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts.Calls++
	now := time.Now()
	switch {
	case !validPhone.MatchString(msg.To):
		p.counts.Rejected++
		reply(w, http.StatusBadRequest, "error", "invalid phone number")
		return
	case p.keys[key]:
		p.counts.Duplicates++
		reply(w, http.StatusOK, "status", "duplicate")
		return
	}
	for len(p.recent) > 0 && now.Sub(p.recent[0]) >= p.per {
		p.recent = p.recent[1:]
	}
	if len(p.recent) >= p.limit {
		p.counts.Limited++
		wait := p.recent[0].Add(p.per).Sub(now)
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		reply(w, http.StatusTooManyRequests, "error", "rate limited")
		return
	}
	p.recent = append(p.recent, now)
	switch x := p.rng.Float64(); {
	case x < p.fails/2:
		p.counts.Unavailable++
		reply(w, http.StatusServiceUnavailable, "error", "service unavailable")
	case x < p.fails:
		// The SMS goes out, but the answer is lost on the way back.
		p.deliver(key, msg.To, msg.Text, now)
		p.counts.Lost++
		reply(w, http.StatusGatewayTimeout, "error", "gateway timeout")
	default:
		p.deliver(key, msg.To, msg.Text, now)
		reply(w, http.StatusOK, "status", "sent")
	}
}

func (p *Provider) deliver(key, to, text string, at time.Time) {
	p.keys[key] = true
	p.counts.Sent++
	p.counts.Inbox[to]++
	p.counts.Log[to] = append(p.counts.Log[to], Delivery{At: at, Text: text})
}

// Counts returns a copy of the counters.
func (p *Provider) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counts
	c.Inbox = make(map[string]int, len(p.counts.Inbox))
	for k, v := range p.counts.Inbox {
		c.Inbox[k] = v
	}
	c.Log = make(map[string][]Delivery, len(p.counts.Log))
	for k, v := range p.counts.Log {
		c.Log[k] = slices.Clone(v)
	}
	return c
}

func reply(w http.ResponseWriter, status int, field, text string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{field: text})
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
