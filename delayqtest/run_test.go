package delayqtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

type SMS struct {
	To   string `json:"to"`
	Body string `json:"body"`
}

// errUnavailable and errRejected are the provider's answers in the tests.
var (
	errUnavailable = errors.New("503 service unavailable")
	errRejected    = errors.New("400 invalid phone number")
)

// smsHandler answers by the phone number: "+1503" is unavailable,
// "+1400" rejected for good, "+1429" rate-limited for 5s, "+1panic"
// panics, "+1slow" waits for its deadline; anything else is sent.
func smsHandler(_ context.Context, j *job.Job[SMS]) error {
	switch j.Args.To {
	case "+1503":
		return errUnavailable
	case "+1400":
		return retry.Permanent(errRejected)
	case "+1429":
		return retry.After(5*time.Second, errors.New("429 too many requests"))
	case "+1panic":
		panic("provider client bug")
	}
	return nil
}

// runner returns a Runner with typ's handler (or fn) registered.
func runner(t *testing.T, typ *job.Type[SMS], fn func(context.Context, *job.Job[SMS]) error) *delayqtest.Runner {
	t.Helper()
	if fn == nil {
		fn = smsHandler
	}
	reg := job.NewRegistry()
	typ.Handle(reg, fn)
	return &delayqtest.Runner{Registry: reg}
}

func run(t *testing.T, rn *delayqtest.Runner, typ *job.Type[SMS], args SMS, opts ...job.Option) *delayqtest.Result {
	t.Helper()
	res, err := delayqtest.Run(ctx, rn, typ, args, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Each outcome a worker can decide comes out of the real code paths, and
// each Require method passes on its outcome and fails on the others,
// saying what happened.
func TestRunOutcomes(t *testing.T) {
	t.Parallel()
	sms := job.New[SMS]("sms.send", job.Retry(retry.Constant(2*time.Second)), job.MaxRetries(3))
	rn := runner(t, sms, nil)

	ok := run(t, rn, sms, SMS{To: "+15550100"})
	mustPass(t, ok.RequireSuccess)
	mustFail(t, func(tb testing.TB) { ok.RequireRetry(tb, 0, time.Hour) }, "want a retry", "attempt 1: success")
	mustFail(t, func(tb testing.TB) { ok.RequireDead(tb, "") }, "want dead", "success")

	// The type's policy gives the delay.
	retried := run(t, rn, sms, SMS{To: "+1503"})
	mustPass(t, func(tb testing.TB) { retried.RequireRetry(tb, 2*time.Second, 2*time.Second) })
	if retried.Reason != "retry policy" || !errors.Is(retried.Err, errUnavailable) {
		t.Errorf("retry: %s", retried)
	}
	mustFail(t, retried.RequireSuccess, "want success", "retry after 2s (retry policy): 503 service unavailable")
	mustFail(t, func(tb testing.TB) { retried.RequireRetry(tb, time.Second, time.Second) }, "want a retry after 1s", "retry after 2s")

	// A per-job backoff wins over the type's policy.
	backoff := run(t, rn, sms, SMS{To: "+1503"}, job.WithBackoff(retry.Exponential{Initial: 300 * time.Millisecond, Multiplier: 2, Max: time.Minute}))
	mustPass(t, func(tb testing.TB) { backoff.RequireRetry(tb, 300*time.Millisecond, 300*time.Millisecond) })

	dead := run(t, rn, sms, SMS{To: "+1400"})
	mustPass(t, func(tb testing.TB) { dead.RequireDead(tb, "permanent error") })
	mustPass(t, func(tb testing.TB) { dead.RequireDead(tb, "invalid phone number") })
	mustFail(t, func(tb testing.TB) { dead.RequireDead(tb, "retries exhausted") }, `want dead with "retries exhausted"`, "dead (permanent error)")
	mustFail(t, dead.RequireSuccess, "dead (permanent error): 400 invalid phone number")

	after := run(t, rn, sms, SMS{To: "+1429"})
	mustPass(t, func(tb testing.TB) { after.RequireRetryAfter(tb, 5*time.Second) })
	mustFail(t, func(tb testing.TB) { after.RequireRetryAfter(tb, time.Second) }, "want a retry.After of 1s", "retry after 5s (retry.After)")
	mustFail(t, func(tb testing.TB) { retried.RequireRetryAfter(tb, 2*time.Second) }, "(retry policy)")
}

// The retry budget: the attempt after the last retry is dead; the worker's
// default policy (retry.Default(), with jitter) applies to types without one.
func TestRunBudgetAndDefaultPolicy(t *testing.T) {
	t.Parallel()
	sms := job.New[SMS]("sms.send", job.MaxRetries(2))
	rn := runner(t, sms, nil)
	first := run(t, rn, sms, SMS{To: "+1503"})
	mustPass(t, func(tb testing.TB) { first.RequireRetry(tb, 800*time.Millisecond, 1200*time.Millisecond) })

	env, err := sms.Envelope(SMS{To: "+1503"})
	if err != nil {
		t.Fatal(err)
	}
	third, err := rn.Attempt(ctx, env, 3)
	if err != nil {
		t.Fatal(err)
	}
	mustPass(t, func(tb testing.TB) { third.RequireDead(tb, "retries exhausted (attempt 3, max retries 2)") })

	// A Runner's own policy replaces retry.Default().
	rn.Retry = retry.Constant(7 * time.Second)
	mustPass(t, func(tb testing.TB) { run(t, rn, sms, SMS{To: "+1503"}).RequireRetry(tb, 7*time.Second, 7*time.Second) })
}

// RunAll follows retries without waiting until the job ends, each attempt
// seeing the last one's error.
func TestRunAll(t *testing.T) {
	t.Parallel()
	sms := job.New[SMS]("sms.send", job.MaxRetries(5), job.Retry(retry.Constant(time.Minute)))
	var calls atomic.Int32
	var lastErrors []string
	rn := runner(t, sms, func(_ context.Context, j *job.Job[SMS]) error {
		lastErrors = append(lastErrors, j.LastError)
		if calls.Add(1) < 3 {
			return fmt.Errorf("flaky %d", j.Attempt)
		}
		return nil
	})
	results, err := delayqtest.RunAll(ctx, rn, sms, SMS{To: "+15550100"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 || results[2].Outcome != job.OutcomeSuccess || results[1].Message.Attempt != 2 {
		t.Fatalf("results %v, want two retries and a success", results)
	}
	if strings.Join(lastErrors, "|") != "|flaky 1|flaky 2" {
		t.Errorf("LastError per attempt: %q", lastErrors)
	}

	never := job.New[SMS]("sms.never", job.MaxRetries(2))
	results, err = delayqtest.RunAll(ctx, runner(t, never, nil), never, SMS{To: "+1503"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 {
		t.Fatalf("%d results, want 3 (first attempt and 2 retries)", len(results))
	}
	mustPass(t, func(tb testing.TB) { results[2].RequireDead(tb, "retries exhausted") })
}

// A payload that does not decode is dead on the first attempt, with the
// type's DecodeError; a panic is recovered (by the default Recover
// middleware, or by the runner itself without middleware) and retried; an
// unknown type fails like in a worker.
func TestRunDecodePanicUnknown(t *testing.T) {
	t.Parallel()
	sms := job.New[SMS]("sms.send")
	rn := runner(t, sms, nil)

	res, err := rn.Attempt(ctx, &job.Envelope{Type: "sms.send", Payload: []byte(`{"to": 42}`), MaxRetries: 3}, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustPass(t, func(tb testing.TB) { res.RequireDead(tb, "does not decode into delayqtest_test.SMS") })
	var de *job.DecodeError
	if !errors.As(res.Err, &de) || de.Type != "sms.send" {
		t.Errorf("error %v, want a *job.DecodeError", res.Err)
	}

	for _, mws := range [][]job.Middleware{nil, {}} {
		rn.Middleware = mws
		res := run(t, rn, sms, SMS{To: "+1panic"})
		var pe *middleware.PanicError
		if res.Outcome != job.OutcomeRetry || !errors.As(res.Err, &pe) || !strings.Contains(res.Err.Error(), "provider client bug") {
			t.Errorf("middleware %v: panic gave %s, want a retried *middleware.PanicError", mws, res)
		}
	}

	other := job.New[SMS]("sms.other")
	res = run(t, rn, other, SMS{})
	if res.Outcome != job.OutcomeRetry || !strings.Contains(res.Err.Error(), `no handler registered for type "sms.other"`) {
		t.Errorf("unknown type: %s", res)
	}
}

// Middleware runs around the handler, sees the timeout of the job (else
// of its type, else of the runner) and learns the outcome through
// job.OnResult, as in a worker.
func TestRunMiddlewareAndTimeout(t *testing.T) {
	t.Parallel()
	sms := job.New[SMS]("sms.send", job.Timeout(20*time.Millisecond), job.Retry(retry.Constant(time.Second)))
	var seen []string
	record := func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			job.OnResult(ctx, func(r job.Result) { seen = append(seen, fmt.Sprintf("%s %v %v", r.Outcome, r.Delay, m.Timeout)) })
			return next.Handle(ctx, m)
		})
	}
	rn := runner(t, sms, func(ctx context.Context, j *job.Job[SMS]) error {
		<-ctx.Done() // the runner's own deadline, as a worker's
		return ctx.Err()
	})
	rn.Middleware = []job.Middleware{record}
	res := run(t, rn, sms, SMS{To: "+1slow"})
	if !errors.Is(res.Err, context.DeadlineExceeded) || res.Outcome != job.OutcomeRetry {
		t.Errorf("slow handler: %s, want a retried deadline error", res)
	}
	if len(seen) != 1 || seen[0] != "retry 1s 20ms" {
		t.Errorf("middleware saw %q, want one retry after 1s with the type's 20ms timeout", seen)
	}
	// A job's own timeout wins over its type's.
	seen = nil
	run(t, rn, sms, SMS{To: "+1slow"}, job.Timeout(30*time.Millisecond))
	if len(seen) != 1 || seen[0] != "retry 1s 30ms" {
		t.Errorf("middleware saw %q, want the job's 30ms timeout", seen)
	}
}

// Bad input gets a clear error and runs nothing.
func TestRunRefusesBadInput(t *testing.T) {
	t.Parallel()
	sms := job.New[SMS]("sms.send")
	rn := runner(t, sms, nil)
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"no registry", func() error { _, err := delayqtest.Run(ctx, &delayqtest.Runner{}, sms, SMS{}); return err }, "Runner.Registry is required"},
		{"nil runner", func() error { _, err := (*delayqtest.Runner)(nil).Attempt(ctx, &job.Envelope{}, 1); return err }, "Runner.Registry is required"},
		{"nil envelope", func() error { _, err := rn.Attempt(ctx, nil, 1); return err }, "nil envelope"},
		{"nil middleware", func() error {
			_, err := (&delayqtest.Runner{Registry: rn.Registry, Middleware: []job.Middleware{nil}}).Attempt(ctx, &job.Envelope{Type: "sms.send"}, 1)
			return err
		}, "Runner.Middleware[0] is nil"},
		{"attempt 0", func() error { _, err := rn.Attempt(ctx, &job.Envelope{Type: "sms.send"}, 0); return err }, "attempt 0"},
		{"bad option", func() error { _, err := delayqtest.Run(ctx, rn, sms, SMS{}, job.In(-time.Second)); return err }, "negative"},
		{"bad option in RunAll", func() error { _, err := delayqtest.RunAll(ctx, rn, sms, SMS{}, job.ID("a{b}")); return err }, "id"},
	} {
		if err := c.call(); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error wrapping job.ErrInvalid containing %q", c.name, err, c.want)
		}
	}
}

// A job whose expiry has come is not handed to the handler, as no claim
// hands it out: it is dead, "expired" (or dropped with DropExpired).
func TestRunExpired(t *testing.T) {
	t.Parallel()
	otp := job.New[SMS]("sms.otp", job.ExpireIn(time.Minute))
	called := 0
	rn := runner(t, otp, func(context.Context, *job.Job[SMS]) error { called++; return nil })
	run(t, rn, otp, SMS{To: "+1"}).RequireSuccess(t)

	rn.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	res := run(t, rn, otp, SMS{To: "+1"})
	mustPass(t, func(tb testing.TB) { res.RequireDead(tb, "expired") })
	mustFail(t, res.RequireSuccess, "dead (expired): expired: not started by its expiry at ")
	dropped := run(t, rn, otp, SMS{To: "+1"}, job.DropExpired())
	if dropped.Outcome != job.OutcomeDead || dropped.Reason != "expired, dropped" {
		t.Errorf("DropExpired: %s", dropped)
	}
	if called != 1 {
		t.Errorf("the handler ran %d times, want once (before the expiry)", called)
	}
}

// retry.Snooze brings the job back after its delay and gives the attempt
// back, up to 100 (retrydecide.MaxSnoozes); RunAll follows snoozes at the same
// attempt number.
func TestRunSnooze(t *testing.T) {
	t.Parallel()
	sms := job.New[SMS]("sms.send", job.MaxRetries(0))
	var calls []int
	rn := runner(t, sms, func(_ context.Context, j *job.Job[SMS]) error {
		calls = append(calls, j.Attempt)
		if j.Snoozes < 2 {
			return retry.Snooze(3 * time.Second)
		}
		return nil
	})
	first := run(t, rn, sms, SMS{To: "+1"})
	mustPass(t, func(tb testing.TB) { first.RequireSnooze(tb, 3*time.Second) })
	mustFail(t, func(tb testing.TB) { first.RequireSnooze(tb, time.Second) }, "want a retry.Snooze of 1s", "retry after 3s (retry.Snooze)")
	mustFail(t, func(tb testing.TB) { first.RequireRetryAfter(tb, 3*time.Second) }, "want a retry.After of 3s")

	calls = nil
	results, err := delayqtest.RunAll(ctx, rn, sms, SMS{To: "+1"})
	if err != nil {
		t.Fatal(err)
	}
	// MaxRetries(0): a failed attempt would be dead, but snoozes spend none.
	if len(results) != 3 || results[2].Outcome != job.OutcomeSuccess || fmt.Sprint(calls) != "[1 1 1]" {
		t.Fatalf("results %v, attempts %v; want two snoozes at attempt 1, then a success", results, calls)
	}

	// At the cap, a snooze is a failed attempt like any other.
	env, err := sms.Envelope(SMS{To: "+1"})
	if err != nil {
		t.Fatal(err)
	}
	env.Snoozes, env.MaxRetries = retrydecide.MaxSnoozes, 3
	always := runner(t, sms, func(context.Context, *job.Job[SMS]) error { return retry.Snooze(time.Second) })
	res, err := always.Attempt(ctx, env, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Snoozed || res.Outcome != job.OutcomeRetry || res.Reason != "retry policy" || !strings.Contains(res.Err.Error(), "snoozed 100 times, the cap; last:") {
		t.Errorf("a snooze at the cap: %s, want a failed attempt", res)
	}
}

// A run shows the next jobs a success enqueues (declared at enqueue and by
// the handler) and the result the handler kept; a failed attempt shows
// neither.
func TestRunShowsNextJobsAndResult(t *testing.T) {
	t.Parallel()
	receipt := job.New[SMS]("sms.receipt")
	send := job.New[SMS]("sms.send.chained")
	reg := job.NewRegistry()
	job.HandleResult(send, reg, func(ctx context.Context, j *job.Job[SMS]) (string, error) {
		if j.Args.To == "+1503" {
			next, _ := receipt.Envelope(SMS{To: "never"})
			_ = job.Next(ctx, next)
			return "", errUnavailable
		}
		next, err := receipt.Envelope(SMS{To: j.Args.To, Body: "sent: " + j.Args.Body})
		if err != nil {
			return "", err
		}
		return "msg-1", job.Next(ctx, next)
	})
	rn := &delayqtest.Runner{Registry: reg}
	declared, err := receipt.Envelope(SMS{To: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := delayqtest.Run(t.Context(), rn, send, SMS{To: "+15550100", Body: "hi"}, job.Then(declared))
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)
	if len(res.Next) != 2 || string(res.Next[0].Payload) != `{"to":"ops","body":""}` || string(res.Next[1].Payload) != `{"to":"+15550100","body":"sent: hi"}` {
		t.Fatalf("next jobs %+v", res.Next)
	}
	if string(res.Value) != `"msg-1"` {
		t.Fatalf("result %q", res.Value)
	}
	failed, err := delayqtest.Run(t.Context(), rn, send, SMS{To: "+1503"}, job.Then(declared))
	if err != nil {
		t.Fatal(err)
	}
	if failed.Outcome != job.OutcomeRetry || failed.Next != nil || failed.Value != nil {
		t.Fatalf("failed attempt: %s, next %v, result %q", failed, failed.Next, failed.Value)
	}
}
