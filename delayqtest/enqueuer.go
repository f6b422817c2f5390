package delayqtest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// Enqueuer is a job.Enqueuer that records what it is given instead of
// storing it, for tests of code that enqueues. It decides with the
// broker's own rules (the code the broker's answers are built with), so it
// refuses what the broker refuses: invalid envelopes and payloads over the
// cap (errors wrap job.ErrInvalid), and an id still pending in its queue (a
// *broker.DuplicateError, wrapping broker.ErrDuplicate), however alike the
// envelopes and whatever the timing: each Enqueue is a call of its own,
// and no reply is lost here to send one again. A job with a pending id and
// job.Replace replaces it (the old one is marked Replaced), as by the
// broker. A job with job.Debounce decides as the broker's does
// (docs/flow-control.md#debounce), by the Enqueuer's clock: a pending job
// whose ready time is ahead is replaced, ready the window after now; one
// that is due is replaced and its ready time kept; a running one (see
// [Enqueuer.Claim]) is refused with broker.ErrInProgress; debounced jobs of
// one key in one call each act on what the one before left. It fills in
// what the broker fills in: ID, Queue, CreatedAt and ReadyAt by its clock.
// It also has the broker's Cancel, Reschedule and Job, so it can stand in
// for a broker that code enqueues to, cancels and moves jobs on, and looks
// them up, the typed helpers (job.Type's Cancel, Reschedule and Lookup)
// included. No worker runs here: a test says when a job is claimed
// ([Enqueuer.Claim]) and when it ends ([Enqueuer.End]). The end of a
// job.Unique job is not remembered, so Unique's window after success is not
// modelled. It is safe for concurrent use; the zero value is ready.
type Enqueuer struct {
	// Now is the clock for CreatedAt and ReadyAt. nil means time.Now.
	Now func() time.Time
	// Fail, when set, is asked about every envelope before it is
	// recorded; an error refuses that envelope (nothing is recorded for
	// it), as a broker that is down would.
	Fail func(env *job.Envelope) error
	// MaxPayloadBytes is the payload cap, as broker.Options'. 0 means the
	// broker's default (1 MiB); negative means none.
	MaxPayloadBytes int

	mu   sync.Mutex
	jobs []*Recorded
}

// Recorded is one envelope the Enqueuer accepted.
type Recorded struct {
	*job.Envelope      // a copy, with ID, Queue, CreatedAt and ReadyAt filled in
	Cancelled     bool // removed by Cancel since
	Replaced      bool // replaced since by a job with its id and job.Replace or job.Debounce
	Running       bool // claimed (Claim) and not ended: a worker holds it
	StopAsked     bool // Cancel was called while it ran: its worker was asked to stop
	Ended         bool // ended since (End): its id is free
}

var (
	_ job.Enqueuer   = (*Enqueuer)(nil)
	_ job.Controller = (*Enqueuer)(nil)
)

// Enqueue records envs, or reports why not, as broker.Enqueue: a batch with
// an invalid envelope is refused whole; with several envelopes, per-job
// failures (duplicates, Fail) come in a *job.BatchError.
func (e *Enqueuer) Enqueue(ctx context.Context, envs ...*job.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := e.now()
	for i, env := range envs {
		if err := rules.Prepare(env, now, rules.PayloadCap(e.MaxPayloadBytes)); err != nil {
			if len(envs) > 1 {
				err = fmt.Errorf("job %d of %d: %w", i+1, len(envs), err)
			}
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	errs := make([]error, len(envs))
	failed := false
	// What each id of the call found before it, and what the call's jobs
	// with the id left since (rules.Debounce acts on it).
	before := make(map[string]rules.Found, len(envs))
	earlier := make(map[string]rules.Earlier, len(envs))
	for i, env := range envs {
		if e.Fail != nil {
			errs[i] = e.Fail(env)
		}
		key := env.Queue + "\n" + env.ID
		p := e.pending(env.Queue, env.ID)
		o := rules.Stored
		if errs[i] == nil {
			found, seen := before[key]
			if !seen {
				found = e.found(p, now)
				before[key] = found
			}
			switch {
			case env.Debounce > 0:
				o = rules.Debounce(found, earlier[key])
			case seen:
				o = rules.Enqueue(rules.EarlierInCall, env.Unique, env.Replace)
			default:
				o = rules.Enqueue(found, env.Unique, env.Replace)
			}
			earlier[key] = earlier[key].After(o)
			errs[i] = rules.EnqueueErr(o, env.Queue, env.ID)
		}
		if errs[i] != nil {
			failed = true
			continue
		}
		// Whole ms, rounded up, as the broker stores it.
		delay := env.Delay
		if env.Debounce > 0 {
			delay = env.Debounce // ready at the end of the window
		}
		switch {
		case o == rules.Kept:
			env.ReadyAt = p.ReadyAt
		case !env.At.IsZero():
			env.ReadyAt = time.UnixMilli(rules.ReadyMS(env.At))
		default:
			env.ReadyAt = time.UnixMilli(rules.ReadyAfter(now, delay))
		}
		if o == rules.Replaced || o == rules.Kept {
			p.Replaced = true
		}
		c := *env
		e.jobs = append(e.jobs, &Recorded{Envelope: &c})
	}
	switch {
	case !failed:
		return nil
	case len(envs) == 1:
		return errs[0]
	}
	return &job.BatchError{Errs: errs}
}

// Cancel cancels a job, as broker.Cancel: a pending job is removed
// (Recorded.Cancelled); a running one (Claim) is asked to stop
// (Recorded.StopAsked, Cancelled.Running) and runs on until End. An error
// wraps broker.ErrNotFound when no job with that id is pending or running
// in queue.
func (e *Enqueuer) Cancel(ctx context.Context, queue, id string) (job.Cancelled, error) {
	if err := ctx.Err(); err != nil {
		return job.Cancelled{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.pending(queue, id); r != nil && r.Running {
		r.StopAsked = true
		return job.Cancelled{Running: true}, nil
	}
	r, err := e.change(queue, id)
	if err != nil {
		return job.Cancelled{}, err
	}
	r.Cancelled = true
	return job.Cancelled{}, nil
}

// Reschedule moves a pending job to ready at at (the zero time means now,
// by the Enqueuer's clock, in whole ms rounded down: due at once, as on the
// broker) and returns the new ready time, as broker.Reschedule: an error
// wrapping broker.ErrNotFound when no job with that id is pending in
// queue, broker.ErrInProgress when it is running (Claim).
func (e *Enqueuer) Reschedule(ctx context.Context, queue, id string, at time.Time) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	ready := rules.ReadyAfter(e.now(), 0)
	if !at.IsZero() {
		ready = rules.ReadyMS(at)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.change(queue, id)
	if err != nil {
		return time.Time{}, err
	}
	r.ReadyAt = time.UnixMilli(ready)
	return r.ReadyAt, nil
}

// Claim marks the pending job id of queue as claimed by a worker: it is
// running until [Enqueuer.End]. While it runs, an enqueue of its id with
// job.Replace or job.Debounce and Reschedule fail with an error wrapping
// broker.ErrInProgress, Cancel asks it to stop, as on a broker, and Job
// reports it processing. An error wraps broker.ErrNotFound when no job
// with the id is pending, broker.ErrInProgress when it runs already.
func (e *Enqueuer) Claim(queue, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.change(queue, id)
	if err != nil {
		return err
	}
	r.Running = true
	return nil
}

// End marks the pending job id of queue as ended (succeeded, dead, or
// cancelled while it ran), running or not: its id is free, and an enqueue
// of it stores a new job. An error wraps broker.ErrNotFound when no job
// with the id is pending.
func (e *Enqueuer) End(queue, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.pending(queue, id)
	if r == nil {
		return fmt.Errorf("%w: no job %q in queue %q", broker.ErrNotFound, id, queue)
	}
	r.Running, r.Ended = false, true
	return nil
}

// found is what an enqueue (or a change) finds in r, the pending job of its
// id or nil, at now: running, due (its ready time has passed, by the ms
// clock the broker compares in), or scheduled with its ready time ahead.
func (e *Enqueuer) found(r *Recorded, now time.Time) rules.Found {
	switch {
	case r == nil:
		return rules.Absent
	case r.Running:
		return rules.Held
	case r.ReadyAt.UnixMilli() > now.UnixMilli():
		return rules.Scheduled
	}
	return rules.Due
}

// change finds the pending job a cancel or reschedule changes, deciding as
// the broker does (rules.Change).
func (e *Enqueuer) change(queue, id string) (*Recorded, error) {
	r := e.pending(queue, id)
	if err := rules.Change(e.found(r, e.now()), queue, id); err != nil {
		return nil, err
	}
	return r, nil
}

// Job returns a pending job as broker.Job does (StateScheduled, or
// StateProcessing once claimed, with its envelope, body and ready time;
// Now by the Enqueuer's clock), or an error
// wrapping broker.ErrNotFound when no job with that id is pending in queue
// (a cancelled or replaced one is gone, as in Redis).
func (e *Enqueuer) Job(ctx context.Context, queue, id string) (*job.JobInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	r := e.pending(queue, id)
	var env job.Envelope
	state := job.StateScheduled
	if r != nil {
		env = *r.Envelope
		if r.Running {
			state = job.StateProcessing
		}
	}
	e.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("%w: no job %q in queue %q", broker.ErrNotFound, id, queue)
	}
	body, err := env.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &job.JobInfo{ID: id, Queue: queue, State: state, Now: e.now(), ReadyAt: env.ReadyAt, Body: body, Envelope: &env}, nil
}

// pending returns the recorded job of queue and id that is neither
// cancelled, replaced nor ended, or nil.
func (e *Enqueuer) pending(queue, id string) *Recorded {
	for _, r := range e.jobs {
		if r.Queue == queue && r.ID == id && !r.Cancelled && !r.Replaced && !r.Ended {
			return r
		}
	}
	return nil
}

func (e *Enqueuer) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// Jobs returns every job recorded, in the order they were enqueued,
// cancelled ones included.
func (e *Enqueuer) Jobs() []Recorded {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Recorded, len(e.jobs))
	for i, r := range e.jobs {
		c := *r.Envelope
		out[i] = Recorded{Envelope: &c, Cancelled: r.Cancelled, Replaced: r.Replaced, Running: r.Running, StopAsked: r.StopAsked, Ended: r.Ended}
	}
	return out
}

// Reset forgets every recorded job.
func (e *Enqueuer) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.jobs = nil
}

// Enqueued is a recorded job of one type, with its arguments decoded.
type Enqueued[T any] struct {
	Recorded
	Args T
}

// Check is one condition on a recorded job; see [HasID], [InQueue],
// [HasArgs], [ReadyIn], [ReadyAt], [ExpiresIn], [Pending], [Cancelled],
// [Replaced] and [Where] (any other field of the envelope: its retry
// budget, timeout, headers).
type Check struct {
	desc  string
	match func(r *Recorded, args any) bool
}

// String says what the check wants, as failure messages show it.
func (c Check) String() string { return c.desc }

// HasID wants the job id id.
func HasID(id string) Check {
	return Check{fmt.Sprintf("id %q", id), func(r *Recorded, _ any) bool { return r.ID == id }}
}

// InQueue wants the queue q.
func InQueue(q string) Check {
	return Check{fmt.Sprintf("queue %q", q), func(r *Recorded, _ any) bool { return r.Queue == q }}
}

// HasArgs wants arguments equal to args (reflect.DeepEqual after
// decoding, so args must be of the type's argument type).
func HasArgs(args any) Check {
	return Check{fmt.Sprintf("args %+v", args), func(_ *Recorded, got any) bool { return reflect.DeepEqual(got, args) }}
}

// ReadyIn wants the job ready d after it was enqueued (ReadyAt −
// CreatedAt), give or take within.
func ReadyIn(d, within time.Duration) Check {
	return Check{fmt.Sprintf("ready in %v (±%v)", d, within), func(r *Recorded, _ any) bool {
		return near(r.ReadyAt.Sub(r.CreatedAt), d, within)
	}}
}

// ReadyAt wants the job ready at at, give or take within.
func ReadyAt(at time.Time, within time.Duration) Check {
	return Check{fmt.Sprintf("ready at %s (±%v)", at.Format(time.RFC3339Nano), within), func(r *Recorded, _ any) bool {
		return near(r.ReadyAt.Sub(at), 0, within)
	}}
}

// ExpiresIn wants an expiry (job.ExpireIn, job.ExpireAt) d after the job
// was enqueued (ExpireAt − CreatedAt), give or take within.
func ExpiresIn(d, within time.Duration) Check {
	return Check{fmt.Sprintf("expires in %v (±%v)", d, within), func(r *Recorded, _ any) bool {
		return !r.ExpireAt.IsZero() && near(r.ExpireAt.Sub(r.CreatedAt), d, within)
	}}
}

// Pending wants a job that was neither cancelled, replaced nor ended.
func Pending() Check {
	return Check{"pending", func(r *Recorded, _ any) bool { return !r.Cancelled && !r.Replaced && !r.Ended }}
}

// Replaced wants a job that a later one with its id and job.Replace or
// job.Debounce replaced.
func Replaced() Check {
	return Check{"replaced", func(r *Recorded, _ any) bool { return r.Replaced }}
}

// Cancelled wants a job that was cancelled.
func Cancelled() Check {
	return Check{"cancelled", func(r *Recorded, _ any) bool { return r.Cancelled }}
}

// Where wants whatever f accepts; desc says what, for failure messages.
func Where(desc string, f func(env *job.Envelope) bool) Check {
	return Check{desc, func(r *Recorded, _ any) bool { return f(r.Envelope) }}
}

func near(got, want, within time.Duration) bool {
	d := got - want
	return d >= -within && d <= within
}

// ofType returns the recorded jobs of type typ, in order, with their
// arguments decoded by the type's own handler path (its codec). A payload
// that does not decode fails the test.
func ofType[T any](t testing.TB, e *Enqueuer, typ *job.Type[T]) []Enqueued[T] {
	t.Helper()
	var out []Enqueued[T]
	for _, r := range e.Jobs() {
		if r.Type != typ.Name() {
			continue
		}
		args, err := Decode(typ, r.Envelope)
		if err != nil {
			t.Fatalf("delayqtest: recorded job %s %q: %v", r.Type, r.ID, err)
		}
		out = append(out, Enqueued[T]{Recorded: r, Args: args})
	}
	return out
}

// RequireEnqueuedN fails the test unless exactly n recorded jobs of type
// typ pass every check (n = 0: none does), and returns them. The failure
// lists what was recorded.
func RequireEnqueuedN[T any](t testing.TB, e *Enqueuer, typ *job.Type[T], n int, checks ...Check) []Enqueued[T] {
	t.Helper()
	all := ofType(t, e, typ)
	var match []Enqueued[T]
	for _, j := range all {
		if passes(&j.Recorded, j.Args, checks) {
			match = append(match, j)
		}
	}
	if len(match) != n {
		t.Fatalf("delayqtest: want %d job(s) of type %s with %s, found %d%s", n, typ.Name(), describe(checks), len(match), listing(all, checks))
	}
	return match
}

func passes(r *Recorded, args any, checks []Check) bool {
	for _, c := range checks {
		if !c.match(r, args) {
			return false
		}
	}
	return true
}

func describe(checks []Check) string {
	if len(checks) == 0 {
		return "any options"
	}
	parts := make([]string, len(checks))
	for i, c := range checks {
		parts[i] = c.desc
	}
	return strings.Join(parts, ", ")
}

// listing shows every recorded job of the type and the checks it fails.
func listing[T any](all []Enqueued[T], checks []Check) string {
	if len(all) == 0 {
		return "; none of the type was enqueued"
	}
	var b strings.Builder
	b.WriteString("; enqueued:")
	for _, j := range all {
		fmt.Fprintf(&b, "\n\tid %q queue %q ready in %v args %+v", j.ID, j.Queue, j.ReadyAt.Sub(j.CreatedAt), j.Args)
		if j.Cancelled {
			b.WriteString(" (cancelled)")
		}
		if j.Replaced {
			b.WriteString(" (replaced)")
		}
		if j.Running {
			b.WriteString(" (running)")
		}
		if j.Ended {
			b.WriteString(" (ended)")
		}
		var failed []string
		for _, c := range checks {
			if !c.match(&j.Recorded, j.Args) {
				failed = append(failed, c.desc)
			}
		}
		if len(failed) > 0 {
			fmt.Fprintf(&b, " — not %s", strings.Join(failed, ", "))
		}
	}
	return b.String()
}

// Decode decodes env's payload into typ's arguments through typ's own
// registered handler, so that the type's codec is used exactly as a
// worker uses it. A payload that does not decode gives the error a
// handler would get: a *job.DecodeError, wrapped in retry.Permanent.
func Decode[T any](typ *job.Type[T], env *job.Envelope) (T, error) {
	var args T
	reg := job.NewRegistry()
	typ.Handle(reg, func(_ context.Context, j *job.Job[T]) error { // a new registry: it cannot hold typ
		args = j.Args
		return nil
	})
	entry, _ := reg.Table(registry.Key{}).Lookup(typ.Name())
	err := entry.Handler.Handle(context.Background(), &job.Message{Envelope: *env})
	return args, err
}
