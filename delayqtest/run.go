package delayqtest

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	jobattempt "github.com/delayq/delayq/internal/attempt"
	"github.com/delayq/delayq/internal/guard"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

// Runner runs jobs in-process, one attempt at a time, the way a worker
// would after claiming them: the registry's handler (which decodes the
// arguments) inside the middleware chain, then the worker's decision on a
// failure (the same code: retry after how long, or dead, and why). No
// Redis is involved and nothing is stored: each run returns a [Result].
//
// Its fields mirror worker.Options's of the same names; the zero value of
// each is the worker's default. Registry is required.
type Runner struct {
	// Registry holds the handlers, as worker.Options.Registry.
	Registry *job.Registry
	// Middleware wraps every handler, the first outermost, around the
	// worker's own deadline and panic recovery, as worker.Options's.
	Middleware []job.Middleware
	// Retry is the policy of jobs and types that set none. nil means
	// retry.Default().
	Retry retry.Policy
	// Timeout is the handler deadline of jobs and types that set none; 0
	// means none.
	Timeout time.Duration
	// Now is the clock for the message's ClaimedAt (and ReadyAt and
	// CreatedAt when the envelope has none). nil means time.Now.
	Now func() time.Time
	// MaxPayloadBytes is the payload cap of the broker the worker uses
	// (broker.Options.MaxPayloadBytes): a succeeded attempt whose next
	// jobs (job.Then, job.Next) the broker would refuse, one over the cap
	// included, fails for good, as on a worker. 0 means the broker's
	// default (1 MiB); negative means none.
	MaxPayloadBytes int
}

// Result is what became of one attempt.
type Result struct {
	// Outcome is job.OutcomeSuccess, job.OutcomeRetry or job.OutcomeDead.
	Outcome job.Outcome
	// Err is what the handler chain returned (a panic's
	// *middleware.PanicError included); nil on success.
	Err error
	// Delay is how long until the next attempt, for a retry.
	Delay time.Duration
	// Reason says why a failure retries or dies, as a worker's logs say:
	// "permanent error", "retries exhausted (...)", "retry.Snooze",
	// "retry.After" or "retry policy".
	Reason string
	// Snoozed: the handler returned retry.Snooze, so the job comes back
	// after Delay and the attempt is given back (Outcome is
	// job.OutcomeRetry), as long as the job has snoozed fewer than
	// 100 times.
	Snoozed bool
	// Message is what the handler was given.
	Message *job.Message
	// Next are the jobs a success enqueues after the job (job.Then's,
	// then those the handler declared with job.Next), as declared: a
	// worker gives those without an ID the derived id (docs/batches.md). Nil unless the
	// attempt succeeded (a next job the broker refuses, e.g. over
	// MaxPayloadBytes, fails it: dead, "permanent error").
	Next []*job.Envelope
	// Value is the result the handler kept (job.SetResult,
	// job.HandleResult), kept with the job when it is retained; nil when
	// none, or when the attempt failed.
	Value []byte
}

// String describes the result in one line, as failure messages show it.
func (r *Result) String() string {
	m := r.Message
	s := fmt.Sprintf("job %s %q attempt %d: %s", m.Type, m.ID, m.Attempt, r.Outcome)
	switch r.Outcome {
	case job.OutcomeRetry:
		s += fmt.Sprintf(" after %v (%s)", r.Delay, r.Reason)
	case job.OutcomeDead:
		s += " (" + r.Reason + ")"
	}
	if r.Err != nil {
		msg, _, _ := strings.Cut(r.Err.Error(), "\n")
		s += ": " + msg
	}
	return s
}

// Run builds a job of type typ with args and opts (as typ.Enqueue would)
// and runs its first attempt through r. It returns an error, wrapping
// job.ErrInvalid, when the job cannot be built or r has no Registry; the
// handler's own error is in the Result.
func Run[T any](ctx context.Context, r *Runner, typ *job.Type[T], args T, opts ...job.Option) (*Result, error) {
	env, err := typ.Envelope(args, opts...)
	if err != nil {
		return nil, err
	}
	return r.Attempt(ctx, env, 1)
}

// RunAll runs a job of type typ with args and opts attempt after attempt,
// without waiting for the retry delays, until an attempt succeeds or the
// job is dead, and returns every attempt's result in order (at most the
// job's MaxRetries+1, plus its snoozes). Each retry carries the previous
// attempt's error as LastError, as a worker's does; a snooze gives its
// attempt back (the next run has the same attempt number) and counts in
// Snoozes, up to 100. Errors are Run's.
func RunAll[T any](ctx context.Context, r *Runner, typ *job.Type[T], args T, opts ...job.Option) ([]*Result, error) {
	env, err := typ.Envelope(args, opts...)
	if err != nil {
		return nil, err
	}
	var out []*Result
	for attempt := 1; ; {
		res, err := r.Attempt(ctx, env, attempt)
		if err != nil {
			return out, err
		}
		out = append(out, res)
		switch {
		case res.Outcome != job.OutcomeRetry:
			return out, nil
		case res.Snoozed:
			env.Snoozes++ // the attempt is given back
		default:
			env.LastError = res.Err.Error()
			attempt++
		}
	}
}

// Attempt runs attempt number attempt (1 for the first) of env through r:
// any envelope, e.g. one with a payload that does not decode, or a later
// attempt to see the retry budget run out. env is not changed; a missing
// ID, Queue, CreatedAt or ReadyAt is filled in on the message.
//
// A job whose ExpireAt has come by r's clock is not handed to the handler,
// as no worker's claim hands it out: it is dead with Reason "expired"
// (with job.DropExpired "expired, dropped": the broker deletes and counts
// it instead of keeping a dead record).
//
// A success whose next jobs (job.Then's, the handler's job.Next) the
// broker would refuse, one over r.MaxPayloadBytes included, is a permanent
// failure (dead), as on a worker, which enqueues them before its ack.
//
// It returns an error wrapping job.ErrInvalid for a nil env, a Runner
// without a Registry, a nil Middleware entry or an attempt below 1.
func (r *Runner) Attempt(ctx context.Context, env *job.Envelope, attempt int) (*Result, error) {
	switch {
	case r == nil || r.Registry == nil:
		return nil, fmt.Errorf("delayqtest: %w: Runner.Registry is required", job.ErrInvalid)
	case env == nil:
		return nil, fmt.Errorf("delayqtest: %w: nil envelope", job.ErrInvalid)
	case attempt < 1:
		return nil, fmt.Errorf("delayqtest: %w: attempt %d; the first attempt is 1", job.ErrInvalid, attempt)
	}
	for i, mw := range r.Middleware {
		if mw == nil {
			return nil, fmt.Errorf("delayqtest: %w: Runner.Middleware[%d] is nil", job.ErrInvalid, i)
		}
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	at := now()
	m := &job.Message{Envelope: *env, Attempt: attempt, ClaimedAt: at}
	if m.Queue == "" {
		m.Queue = naming.DefaultQueue
	}
	if m.ID == "" {
		m.ID = job.NewID()
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = at
	}
	if m.ReadyAt.IsZero() {
		m.ReadyAt = at
	}
	if !m.ExpireAt.IsZero() && !at.Before(m.ExpireAt) {
		// The claim ends an expired job: no handler, no attempt.
		res := &Result{Outcome: job.OutcomeDead, Reason: "expired", Message: m,
			Err: fmt.Errorf("expired: not started by its expiry at %s", m.ExpireAt.Format(time.RFC3339Nano))}
		if m.DropExpired {
			res.Reason = "expired, dropped"
		}
		return res, nil
	}
	entry, known := r.Registry.Table(registry.Key{}).Lookup(m.Type)
	// The handler's deadline: the job's, else its type's, else the
	// runner's, as the worker gives it.
	if m.Timeout <= 0 {
		m.Timeout = entry.Timeout
	}
	if m.Timeout <= 0 {
		m.Timeout = r.Timeout
	}
	h := entry.Handler
	if !known {
		h = job.HandlerFunc(func(context.Context, *job.Message) error {
			return fmt.Errorf("no handler registered for type %q", m.Type)
		})
	}
	mws := slices.Concat(r.Middleware, []job.Middleware{guard.Timeout(0), guard.Recover()})
	ctx, a := jobattempt.With[job.Envelope, job.Result, job.Progress](ctx, nil)
	err := call(ctx, guard.Chain(h, mws...), m)
	var next []*job.Envelope
	if err == nil {
		next = slices.Concat(m.Next, a.Next())
		// The worker enqueues the next jobs before it acks: the broker
		// names and checks them (rules.NextJobs), and one it refuses
		// fails the attempt for good (worker/outcome.go, chain).
		if _, nerr := rules.NextJobs(m.ID, m.CreatedAt, next, at, rules.PayloadCap(r.MaxPayloadBytes)); nerr != nil {
			err = retry.Permanent(fmt.Errorf("enqueue the next jobs: %w", nerr))
		}
	}
	res := &Result{Outcome: job.OutcomeSuccess, Err: err, Message: m}
	if err == nil {
		res.Next = next
		res.Value, _ = a.Result()
	} else {
		if _, ok := retrydecide.SnoozeDelay(err); ok && m.Snoozes >= retrydecide.MaxSnoozes {
			// The worker's cap: this snooze is a failed attempt.
			err = fmt.Errorf("snoozed %d times, the cap; last: %s", m.Snoozes, err.Error())
			res.Err = err
		}
		d := retrydecide.Decide(m.Attempt, m.MaxRetries, rules.Policy(m, entry.Retry, r.fallback()), err)
		res.Reason, res.Delay, res.Outcome, res.Snoozed = d.Reason, d.Delay, job.OutcomeRetry, d.Snooze
		if d.Dead {
			res.Delay, res.Outcome = 0, job.OutcomeDead
		}
	}
	a.Settle(job.Result{Outcome: res.Outcome, Err: err, Delay: res.Delay})
	return res, nil
}

// call runs h, turning a panic that escaped the middleware into an error,
// as the worker does.
func call(ctx context.Context, h job.Handler, m *job.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &middleware.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, m)
}

// RequireSuccess fails the test unless the attempt succeeded.
func (r *Result) RequireSuccess(t testing.TB) {
	t.Helper()
	if r.Outcome != job.OutcomeSuccess {
		t.Fatalf("delayqtest: want success, got %s", r)
	}
}

// RequireRetry fails the test unless the attempt failed and the job is
// retried after a delay in [min, max] (pass min == max for an exact delay,
// e.g. a policy without jitter). It returns the delay.
func (r *Result) RequireRetry(t testing.TB, min, max time.Duration) time.Duration {
	t.Helper()
	if r.Outcome != job.OutcomeRetry {
		t.Fatalf("delayqtest: want a retry after %s, got %s", span(min, max), r)
	}
	if r.Delay < min || r.Delay > max {
		t.Fatalf("delayqtest: want a retry after %s, got %s", span(min, max), r)
	}
	return r.Delay
}

// RequireRetryAfter fails the test unless the handler asked for its next
// attempt after exactly d with retry.After.
func (r *Result) RequireRetryAfter(t testing.TB, d time.Duration) {
	t.Helper()
	if r.Outcome != job.OutcomeRetry || r.Reason != "retry.After" || r.Delay != d {
		t.Fatalf("delayqtest: want a retry.After of %v, got %s", d, r)
	}
}

// RequireSnooze fails the test unless the handler snoozed the job for
// exactly d with retry.Snooze: back after d, its attempt given back.
func (r *Result) RequireSnooze(t testing.TB, d time.Duration) {
	t.Helper()
	if r.Outcome != job.OutcomeRetry || !r.Snoozed || r.Delay != d {
		t.Fatalf("delayqtest: want a retry.Snooze of %v, got %s", d, r)
	}
}

// RequireDead fails the test unless the job is dead after this attempt
// and its reason or error contains want ("" matches any).
func (r *Result) RequireDead(t testing.TB, want string) {
	t.Helper()
	if r.Outcome != job.OutcomeDead {
		t.Fatalf("delayqtest: want dead (%q), got %s", want, r)
	}
	if want != "" && !strings.Contains(r.Reason, want) && (r.Err == nil || !strings.Contains(r.Err.Error(), want)) {
		t.Fatalf("delayqtest: want dead with %q in its reason or error, got %s", want, r)
	}
}

func span(min, max time.Duration) string {
	if min == max {
		return min.String()
	}
	return fmt.Sprintf("between %v and %v", min, max)
}

// fallback is the policy of jobs whose type sets none, as for a worker
// with this Retry.
func (r *Runner) fallback() retry.Policy {
	if r.Retry != nil {
		return r.Retry
	}
	return retry.Default()
}
