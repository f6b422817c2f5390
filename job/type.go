package job

import (
	"context"
	"crypto/rand"
	"fmt"
	"reflect"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/retrycheck"
	"github.com/delayq/delayq/retry"
)

// Enqueuer stores envelopes. *broker.Broker implements it; producer
// middleware wraps it.
//
// Enqueue stores every envelope or reports why not. With one envelope the
// error is that envelope's; with several it is a *[BatchError]. On success it
// fills in each envelope's ID (when empty), Queue, CreatedAt and ReadyAt.
type Enqueuer interface {
	Enqueue(ctx context.Context, envs ...*Envelope) error
}

// BatchError reports which items of a batch call failed (envelopes not
// stored, leases not acked, …). Errs is aligned with the batch; nil entries
// succeeded.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("%d of %d jobs failed, first: %v", n, len(e.Errs), first)
}

// Unwrap returns the non-nil errors, so errors.Is sees each of them.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Job is one delivery of a typed job.
type Job[T any] struct {
	*Message
	Args T
}

// Type is a job type: a name bound to an argument type T, with defaults for
// its jobs. Share one Type value between producers and consumers.
type Type[T any] struct {
	name     string
	defaults settings
	keyFrom  func(T) string // KeyFrom, nil for none
}

// New defines a job type. Options set defaults for every job of the type
// (queue, max retries, timeout, codec, retry policy). New panics, with an
// error wrapping [ErrInvalid] that names what is wrong, when the name or an
// option is invalid: types are defined once, at package level, like
// regexp.MustCompile's patterns.
func New[T any](name string, opts ...TypeOption) *Type[T] {
	t, err := newType[T](name, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// newType is [New] returning its error.
func newType[T any](name string, opts ...TypeOption) (*Type[T], error) {
	if err := naming.Type(name); err != nil {
		return nil, err
	}
	s := settings{queue: naming.DefaultQueue, maxRetries: naming.DefaultMaxRetries, codec: JSON()}
	for i, o := range opts {
		if o == nil {
			return nil, invalid("option %d of job type %q is nil", i+1, name)
		}
		if err := o.applyType(&s); err != nil {
			return nil, err
		}
	}
	t := &Type[T]{name: name, defaults: s}
	internTypeName(name)
	if s.keyFrom != nil {
		fn, ok := s.keyFrom.(func(T) string)
		if !ok {
			return nil, invalid("option KeyFrom of job type %q takes a %T; the type's arguments are a %s, so it must take a func(%[3]s) string", name, s.keyFrom, reflect.TypeFor[T]())
		}
		t.keyFrom = fn
	}
	return t, nil
}

// Name returns the type's name.
func (t *Type[T]) Name() string { return t.name }

// Envelope encodes args and applies opts, returning the envelope to enqueue.
// Errors wrap ErrInvalid.
func (t *Type[T]) Envelope(args T, opts ...Option) (*Envelope, error) {
	s := t.defaults
	for i, o := range opts {
		if o == nil {
			return nil, invalid("option %d of a job of type %q is nil", i+1, t.name)
		}
		if err := o.applyJob(&s); err != nil {
			return nil, err
		}
	}
	payload, err := s.codec.Marshal(args)
	if err != nil {
		return nil, invalid("cannot encode arguments of job type %q: %v", t.name, err)
	}
	if err := s.checkControls(t.name); err != nil {
		return nil, err
	}
	if s.key == "" && t.keyFrom != nil {
		k := t.keyFrom(args)
		if k != "" {
			if err := naming.Key(k); err != nil {
				return nil, fmt.Errorf("key of a job of type %q from its KeyFrom: %w", t.name, err)
			}
		}
		s.key = k
	}
	env := &Envelope{
		ID:         s.id,
		Queue:      s.queue,
		Type:       t.name,
		Payload:    payload,
		MaxRetries: s.maxRetries,
		Timeout:    s.timeout,
		Retain:     s.retain,
		Backoff:    s.backoff,
		Delay:      s.delay,
		At:         s.at,

		Unique:      s.unique,
		UniqueFor:   s.uniqueFor,
		UniqueDead:  s.uniqueDead,
		Replace:     s.replace,
		Debounce:    s.debounce,
		ExpireAt:    s.expireAt,
		DropExpired: s.dropExpired,
		Next:        s.next,
		Key:         s.key,
	}
	if s.expireIn > 0 && s.expireAt.IsZero() {
		env.ExpireAt = time.Now().Add(s.expireIn)
	}
	if err := validateExpiry(env, time.Now()); err != nil {
		return nil, err
	}
	if len(s.headers) > 0 {
		env.Headers = make(map[string]string, len(s.headers))
		for k, v := range s.headers {
			env.Headers[k] = v
		}
	}
	return env, nil
}

// Enqueue encodes args and stores the job through e. It returns the stored
// envelope (with its ID and ReadyAt) or an error: one wrapping ErrInvalid for
// bad input (and a nil envelope), or the broker's (e.g. broker.ErrDuplicate
// for a pending id). With a broker's error the envelope is returned as well,
// with its ID. After broker.ErrOutcomeUnknown (the reply was lost),
// broker.Resend(ctx, err) sends this very call again and answers what it
// did; a new Enqueue of the envelope would be another call.
func (t *Type[T]) Enqueue(ctx context.Context, e Enqueuer, args T, opts ...Option) (*Envelope, error) {
	env, err := t.Envelope(args, opts...)
	if err != nil {
		return nil, err
	}
	return env, e.Enqueue(ctx, env)
}

// Handle registers fn as the handler of this type in r. The payload is
// decoded with the type's codec; a payload that does not decode fails
// permanently with a *[DecodeError]. Handle panics, with an error wrapping
// [ErrInvalid], when fn is nil or the type already has a handler in r:
// handlers are registered once, at program start, as http.Handle does.
func (t *Type[T]) Handle(r *Registry, fn func(ctx context.Context, j *Job[T]) error) {
	if err := t.register(r, fn); err != nil {
		panic(err)
	}
}

// register is [Type.Handle] returning its error.
func (t *Type[T]) register(r *Registry, fn func(ctx context.Context, j *Job[T]) error) error {
	if fn == nil {
		return invalid("nil handler for job type %q", t.name)
	}
	codec, name := t.defaults.codec, t.name
	goType := reflect.TypeFor[T]().String()
	h := HandlerFunc(func(ctx context.Context, m *Message) error {
		j := &Job[T]{Message: m}
		if err := codec.Unmarshal(m.Payload, &j.Args); err != nil {
			return retry.Permanent(&DecodeError{Type: name, GoType: goType, Err: err})
		}
		return fn(ctx, j)
	})
	if err := r.t.Register(name, registry.Entry[Handler, retry.Policy]{Handler: h, Retry: t.defaults.retry, Timeout: t.defaults.timeout, Retain: t.defaults.retain, Queue: t.defaults.queue}); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// settings collects options.
type settings struct {
	id         string
	queue      string
	maxRetries int
	timeout    time.Duration
	retain     time.Duration
	delay      time.Duration
	at         time.Time
	backoff    *Backoff
	headers    map[string]string
	codec      Codec
	retry      retry.Policy

	unique      bool
	uniqueFor   time.Duration
	uniqueDead  bool
	replace     bool
	debounce    time.Duration // window of Debounce, 0: none
	debounceKey string        // the key of Debounce, the job's id
	expireAt    time.Time
	expireIn    time.Duration
	dropExpired bool

	next []*Envelope // per job only (Then)

	key     string // per job only (Key)
	keyFrom any    // a func(T) string, type only (KeyFrom); New checks T
}

// checkControls refuses options that mean nothing without another.
func (s *settings) checkControls(typ string) error {
	if s.uniqueDead && !s.unique {
		return invalid("option UniqueIncludeDead on job type %q needs Unique", typ)
	}
	if s.debounce > 0 {
		switch {
		case s.id != s.debounceKey:
			return invalid("job of type %q has ID %q and Debounce key %q: a debounced job's id is its key; give one of them", typ, s.id, s.debounceKey)
		case s.unique:
			return invalid("job of type %q has Unique and Debounce: Unique refuses a later enqueue that Debounce would take in; choose one", typ)
		case s.replace:
			return invalid("job of type %q has Replace and Debounce: Debounce replaces the pending job already; give Debounce alone", typ)
		case s.delay > 0 || !s.at.IsZero():
			return invalid("job of type %q has In or At and Debounce: a debounced job is ready at the end of its window", typ)
		}
	}
	if s.dropExpired && s.expireAt.IsZero() && s.expireIn <= 0 {
		return invalid("option DropExpired on job type %q needs ExpireAt or ExpireIn", typ)
	}
	return nil
}

// Option sets a property of one job where it is built or enqueued
// ([Type.Envelope], [Type.Enqueue], [Item], a schedule's job options). The
// options that may only be set per job (In, At, ID, Header, WithBackoff,
// Replace, Debounce, ExpireAt, Then, Key) are Options and not TypeOptions, so one given to
// [New] does not compile.
type Option interface {
	applyJob(*settings) error
}

// TypeOption sets a default of a job type, given to [New]. The options
// that may only be set on a type (WithCodec, Retry, KeyFrom) are TypeOptions and
// not Options, so one given per job does not compile.
type TypeOption interface {
	applyType(*settings) error
}

// SharedOption is an option that is valid on a type, as the default of its
// jobs, and per job, where it overrides that default: Queue, MaxRetries,
// Timeout, Retain, Unique, UniqueIncludeDead, ExpireIn, DropExpired.
type SharedOption interface {
	Option
	TypeOption
}

// jobOption is an [Option] that is not a [TypeOption].
type jobOption func(*settings) error

func (o jobOption) applyJob(s *settings) error { return o(s) }

// typeOption is a [TypeOption] that is not an [Option].
type typeOption func(*settings) error

func (o typeOption) applyType(s *settings) error { return o(s) }

// sharedOption is both.
type sharedOption func(*settings) error

func (o sharedOption) applyJob(s *settings) error  { return o(s) }
func (o sharedOption) applyType(s *settings) error { return o(s) }

// In makes the job ready d after the server's now. Per job only.
func In(d time.Duration) Option {
	return jobOption(func(s *settings) error {
		if err := naming.Delay(d); err != nil {
			return err
		}
		s.delay, s.at = d, time.Time{}
		return nil
	})
}

// At makes the job ready at t (a time in the past means now). Per job only.
func At(t time.Time) Option {
	return pointInTime("At", "ready time", t, func(s *settings) { s.at, s.delay = t, 0 })
}

// pointInTime is a per-job option that sets a time (what it is, for the
// error), refusing the zero time.
func pointInTime(name, what string, t time.Time, set func(*settings)) Option {
	return jobOption(func(s *settings) error {
		if t.IsZero() {
			return invalid("%s %s is the zero time", what, name)
		}
		set(s)
		return nil
	})
}

// ID sets the job's id; while a job with that id is pending in its queue,
// enqueueing another fails with broker.ErrDuplicate. Per job only.
func ID(id string) Option {
	return jobOption(func(s *settings) error {
		if err := naming.ID(id); err != nil {
			return err
		}
		s.id = id
		return nil
	})
}

// Queue sets the queue ("default" when unset).
func Queue(q string) SharedOption {
	return sharedOption(func(s *settings) error {
		if err := naming.Queue(q); err != nil {
			return err
		}
		s.queue = q
		return nil
	})
}

// MaxRetries sets how many times a failed job is retried before it is
// dead-lettered; 0 dead-letters on the first failure. Default 10.
func MaxRetries(n int) SharedOption {
	return nonNegative("max retries", n, func(s *settings) { s.maxRetries = n })
}

// Timeout sets the deadline of each attempt's context. 0 leaves it to the
// worker's default.
func Timeout(d time.Duration) SharedOption {
	return nonNegative("timeout", d, func(s *settings) { s.timeout = d })
}

// Retain keeps a succeeded job for d after its ack, with its result
// (SetResult), attempts and timings: Broker.Job answers StateSucceeded
// until then (and ErrNotFound for an id never enqueued). 0, the default,
// deletes it at the ack. On a type it is the default of jobs that do not
// set their own. Memory per retained job: see docs/batches.md#results-and-retention.
func Retain(d time.Duration) SharedOption {
	return nonNegative("retention", d, func(s *settings) { s.retain = d })
}

// nonNegative is an option of both scopes that sets a count or a duration
// (what it is, for the error) that must not be negative.
func nonNegative[N int | time.Duration](what string, n N, set func(*settings)) SharedOption {
	return sharedOption(func(s *settings) error {
		if n < 0 {
			return invalid("%s %v is negative", what, n)
		}
		set(s)
		return nil
	})
}

// WithBackoff stores a retry schedule with the job, overriding the type's
// policy for this job.
func WithBackoff(b retry.Exponential) Option {
	return jobOption(func(s *settings) error {
		if err := retrycheck.Exponential(b.Initial, b.Multiplier, b.Max, b.Jitter); err != nil {
			return fmt.Errorf("job: %w: %v", ErrInvalid, err)
		}
		s.backoff = &Backoff{Initial: b.Initial, Multiplier: b.Multiplier, Max: b.Max, Jitter: b.Jitter}
		return nil
	})
}

// Header adds a metadata header carried with the job. Key and value must be
// valid UTF-8 (they are stored as JSON strings, which would change other
// bytes); the key must not be empty. Per job only.
func Header(key, value string) Option {
	return jobOption(func(s *settings) error {
		if err := validateHeader(key, value); err != nil {
			return err
		}
		h := make(map[string]string, len(s.headers)+1)
		for k, v := range s.headers {
			h[k] = v
		}
		h[key] = value
		s.headers = h
		return nil
	})
}

// Unique makes a job unique in its queue: while it is pending, and for ttl
// after it succeeded, another job with its id is refused with an error
// wrapping broker.ErrDuplicate (a *broker.DuplicateError naming the id).
// With no [ID], the id is derived from the type name and the encoded
// arguments ("u:" and 32 base-32 characters of their SHA-256, see
// docs/scheduling.md), so the same arguments make the same job. A ttl of 0
// refuses duplicates only while the job is pending; a negative ttl is
// refused. Only enqueues that carry Unique are checked against what is
// remembered after the end. Type or job.
func Unique(ttl time.Duration) SharedOption {
	return nonNegative("uniqueness ttl", ttl, func(s *settings) { s.unique, s.uniqueFor = true, ttl })
}

// UniqueIncludeDead makes a job of [Unique] remembered for its ttl also when
// it ends without success: in the dead letters (retries spent, permanent,
// cancelled while running, expired), or cancelled before it ran, or
// expired and dropped ([DropExpired]). By default only a success is. Type
// or job.
func UniqueIncludeDead() SharedOption {
	return sharedOption(func(s *settings) error {
		s.uniqueDead = true
		return nil
	})
}

// Replace makes the enqueue replace a pending job with the same id: while
// it is scheduled (not yet claimed, or waiting for a retry) its arguments,
// options and ready time become this job's, atomically, keeping its
// attempts. A job a worker holds is not replaced: the enqueue fails with
// broker.ErrInProgress. With no pending job the enqueue stores a new one.
// Per job only.
func Replace() Option {
	return jobOption(func(s *settings) error {
		s.replace = true
		return nil
	})
}

// Debounce coalesces the enqueues of one key: the job's id is key, and an
// enqueue made while a job with that id is scheduled and not yet due (its
// window) replaces that job's arguments and options and moves its ready
// time to window after this enqueue, by the server's clock, atomically.
// So a burst of enqueues, each within window of the one before, leaves one
// job, with the last call's arguments, ready window after the last call
// (a trailing-edge debounce, as BullMQ's debounce with replace and
// extend). An enqueue with no pending job under key stores a new job,
// ready window from now. Once the job is due its window is closed: an
// enqueue that finds it due but not yet claimed gives it the new
// arguments and leaves its ready time (it runs once, at once, with the
// newest arguments), and one that finds it held by a worker stores
// nothing and fails with broker.ErrInProgress, as [Replace] does (the
// running job may have read its arguments already; enqueue again when it
// ends, or under another key). A job waiting for a retry is scheduled: a
// debounced enqueue replaces it, keeping its attempts.
//
// key is 1 to 256 bytes as [ID] takes; window must be positive.
// Debounce cannot be combined with [Unique], [Replace], [In] or [At], a
// different [ID], a batch (broker.AddToBatch) or a chain's next jobs
// ([Then]). Per job only. See docs/flow-control.md#debounce.
func Debounce(key string, window time.Duration) Option {
	return jobOption(func(s *settings) error {
		if key == "" {
			return invalid("debounce key must not be empty")
		}
		if err := naming.ID(key); err != nil {
			return fmt.Errorf("debounce key: %w", err)
		}
		if window <= 0 {
			return invalid("debounce window %s of key %q is not positive", window, key)
		}
		if s.id == "" || s.id == s.debounceKey {
			s.id = key
		}
		s.debounce, s.debounceKey = window, key
		return nil
	})
}

// Key gives the job a flow-control key: a customer, a recipient, an
// account. The queue's per-key concurrency cap
// (broker.Broker.SetKeyConcurrency) counts the running jobs of each key.
// It overrides the key the type's [KeyFrom] derives. key is 1 to
// 128 bytes of letters, digits and "._-:/@+=". Per job only. See
// docs/flow-control.md#per-key-caps.
func Key(key string) Option {
	return jobOption(func(s *settings) error {
		if err := naming.Key(key); err != nil {
			return err
		}
		s.key = key
		return nil
	})
}

// KeyFrom declares how a type's jobs get their flow-control key: from
// their arguments, when each is built (the recipient of an SMS, the
// customer of a record). A [Key] given per job wins over it; fn returning
// "" leaves the job without a key. A key fn returns is checked as [Key]'s
// is, and a bad one fails that job's enqueue with an error wrapping
// ErrInvalid. fn's argument type must be the type's: New refuses
// another (T is inferred from fn, so a mismatch names both types). Type
// only.
func KeyFrom[T any](fn func(args T) string) TypeOption {
	return typeOption(func(s *settings) error {
		if fn == nil {
			return invalid("nil KeyFrom function")
		}
		s.keyFrom = fn
		return nil
	})
}

// ExpireAt makes a job that has not started by t never run, across retries
// too: the claim that finds it expired moves it to the dead letters with
// reason "expired" (or drops it and counts it, with [DropExpired]). t must
// be after the ready time. Per job only.
func ExpireAt(t time.Time) Option {
	return pointInTime("ExpireAt", "expiry", t, func(s *settings) { s.expireAt, s.expireIn = t, 0 })
}

// ExpireIn is [ExpireAt] d after the envelope is built (the producer's
// clock). d must be positive and, with a delay, longer than it. Type or
// job.
func ExpireIn(d time.Duration) SharedOption {
	return sharedOption(func(s *settings) error {
		if d <= 0 {
			return invalid("expiry ExpireIn %s is not positive", d)
		}
		s.expireIn, s.expireAt = d, time.Time{}
		return nil
	})
}

// DropExpired makes an expired job be deleted and counted
// (QueueStats.ExpiredDropped) instead of dead-lettered. It needs
// [ExpireAt] or [ExpireIn]. Type or job.
func DropExpired() SharedOption {
	return sharedOption(func(s *settings) error {
		s.dropExpired = true
		return nil
	})
}

// WithCodec sets the payload codec of a type. Type only.
func WithCodec(c Codec) TypeOption {
	return typeOption(func(s *settings) error {
		if c == nil {
			return invalid("nil codec")
		}
		s.codec = c
		return nil
	})
}

// Retry sets the retry policy of a type. Type only; per job, use
// [WithBackoff].
func Retry(p retry.Policy) TypeOption {
	return typeOption(func(s *settings) error {
		if p == nil {
			return invalid("nil retry policy")
		}
		s.retry = p
		return nil
	})
}

// idAlphabet is the characters of a [NewID]: letters and digits, so that an
// id needs no quoting in a URL, a key or a command line.
const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewID returns a random job id: 12 letters and digits, 71 bits of
// randomness. Twelve characters is the longest id that Redis stores in its
// smallest string allocation (16 bytes with the header), and a job's id is
// stored twice: in the jobs hash and in the schedule.
func NewID() string {
	var out [12]byte
	var buf [16]byte
	n := 0
	for n < len(out) {
		_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails (Go 1.24+)
		for _, c := range buf {
			// 248 = 4 × 62: values from 248 up would favour the first
			// characters, so they are drawn again.
			if c < 248 && n < len(out) {
				out[n] = idAlphabet[c%62]
				n++
			}
		}
	}
	return string(out[:])
}

// Queue returns the queue of the type's jobs (its Queue option, or
// "default").
func (t *Type[T]) Queue() string { return t.defaults.queue }

// Cancelled is what a cancel did (broker.Broker.Cancel).
type Cancelled struct {
	// Running: a worker was running the job; it was asked to stop (its
	// handler's context is cancelled with cause broker.ErrCancelled). False:
	// the job was waiting, and is gone: it never runs.
	Running bool
}

// Controller cancels, moves and looks up jobs: what the typed helpers
// [Type.Cancel], [Type.Reschedule] and [Type.Lookup] take.
// *broker.Broker and the test kit's delayqtest.Enqueuer implement it.
type Controller interface {
	Cancel(ctx context.Context, queue, id string) (Cancelled, error)
	Reschedule(ctx context.Context, queue, id string, at time.Time) (time.Time, error)
	Job(ctx context.Context, queue, id string) (*JobInfo, error)
}

// Cancel cancels the type's job id in the type's queue, so the queue is
// never spelled twice, as broker.Broker.Cancel does: a waiting job is
// removed, a running one asked to stop (Cancelled.Running); an error
// wraps broker.ErrNotFound when the queue has no such job.
func (t *Type[T]) Cancel(ctx context.Context, b Controller, id string) (Cancelled, error) {
	return b.Cancel(ctx, t.Queue(), id)
}

// Reschedule moves the type's scheduled job id to ready at at (the zero
// time means now), returning the stored ready time. Errors as for
// broker.Broker.Reschedule (broker.ErrNotFound, broker.ErrInProgress).
func (t *Type[T]) Reschedule(ctx context.Context, b Controller, id string, at time.Time) (time.Time, error) {
	return b.Reschedule(ctx, t.Queue(), id, at)
}

// Lookup returns the type's job id as the broker's inspection sees it
// (scheduled, processing, dead, or succeeded while retained: [Retain]).
// Errors as for broker.Broker.Job (one
// wrapping broker.ErrNotFound when the queue has no such job).
func (t *Type[T]) Lookup(ctx context.Context, b Controller, id string) (*JobInfo, error) {
	return b.Job(ctx, t.Queue(), id)
}

// Item is one job of [Type.EnqueueItems]: its arguments and its own
// options (ID, In, At, Unique, ExpireAt, ...).
type Item[T any] struct {
	Args T
	Opts []Option
}

// EnqueueItems stores one job per item, each with its own options, in one
// broker call (one script call per shard and chunk of 1,000 jobs). An
// item whose options or arguments are invalid fails the whole call before
// anything is written, with an error wrapping ErrInvalid that names the
// item. Otherwise it returns the envelopes, aligned with items, and, when
// some failed (a duplicate id, ...), a *BatchError aligned with items.
func (t *Type[T]) EnqueueItems(ctx context.Context, e Enqueuer, items []Item[T]) ([]*Envelope, error) {
	envs := make([]*Envelope, len(items))
	seen := make(map[string]int, len(items))
	for i, it := range items {
		env, err := t.Envelope(it.Args, it.Opts...)
		if err != nil {
			return nil, fmt.Errorf("item %d of %d: %w", i+1, len(items), err)
		}
		if env.ID != "" {
			if j, ok := seen[env.ID]; ok {
				return nil, invalid("items %d and %d of %d have the same id %q", j+1, i+1, len(items), env.ID)
			}
			seen[env.ID] = i
		}
		envs[i] = env
	}
	if len(envs) == 0 {
		return envs, nil
	}
	return envs, e.Enqueue(ctx, envs...)
}
