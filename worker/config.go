package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/guard"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/retrycheck"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// Queue is a queue a worker serves.
type Queue struct {
	Name string
	// Weight is the queue's share of claims when Options.StrictPriority is
	// false: a queue of weight 3 is tried first three times as often as one
	// of weight 1. 0 means 1.
	Weight int
}

// Options configures a Worker. Broker and Registry are required; every other
// field has a documented default.
type Options struct {
	Broker   *broker.Broker
	Registry *job.Registry

	// Queues to serve. Default: the queues of the types registered in
	// Registry when New is called (the queues of its types), each of weight 1,
	// or "default" when none is registered. When Queues is set and leaves
	// the queue of a registered type unserved, Run logs a warning naming
	// the type and the queue at start (a warning, not an error: a fleet may
	// split one registry's queues among its workers on purpose).
	Queues []Queue
	// StrictPriority claims from Queues in the order given, moving to the
	// next only when a queue has nothing due. Otherwise queues are tried in
	// a random order drawn by weight on every claim round.
	StrictPriority bool

	// Concurrency is how many jobs run at once. Default 10.
	Concurrency int
	// BatchSize caps the jobs claimed in one call. Default 100, or
	// Concurrency+Prefetch when Prefetch is fixed (or off) and that is
	// less. A worker never claims more than its free slots (Concurrency
	// plus what it may prefetch).
	BatchSize int
	// Prefetch is how many claimed jobs may wait for a free goroutine
	// beyond Concurrency, so that a worker claims its next jobs while the
	// current ones run instead of one claim round trip per handful of
	// jobs. Their leases are heartbeated like those of running jobs; at
	// shutdown the ones that have not started are handed back at once,
	// unrun (no attempt spent); one whose lease was lost, or may have run
	// out (no extend confirmed it for nine tenths of the lease: the
	// process stalled, say), is never started. Their attempt counts from
	// the claim: a worker that crashes spends it, like that of a running
	// job.
	//
	// 0 (the default) adapts it to the handlers: as many jobs as the
	// worker's goroutines finish during one claim round trip (Concurrency
	// x round trip / mean handler time, both measured as moving
	// averages), at most 100, so that a prefetched job waits about one
	// round trip for a goroutine. Fast handlers (a no-op handler at
	// concurrency 10 on a local Redis) get the 100; handlers much slower
	// than a round trip get none, so a slow job never waits in one worker
	// while another is idle; a new worker prefetches nothing until it
	// has measured both. When handlers slow down, a handler running
	// longer than the mean counts at its age so far, and at each heartbeat
	// the prefetched jobs beyond what that allows are handed back unrun. A positive value is a fixed number, kept
	// whatever the handlers take (keep it at or below Concurrency when
	// handlers can be slow); negative turns prefetching off.
	//
	// Whatever the setting, a queue with a concurrency cap or a rate
	// limit (Broker.SetConcurrency, SetRateLimit; of the queue or of any
	// of its types) is not prefetched from: its claims take only what
	// free goroutines start at once, so a lease counted against a cap is
	// a running job and a token of a limit is spent by a start. A
	// prefetched job claimed before Broker.Pause may still start after
	// it, within about one round trip with the adaptive default.
	Prefetch int

	// Lease is how long a claimed job stays with this worker without a
	// heartbeat. A crashed worker's jobs come back after it. Default 30s.
	Lease time.Duration
	// HeartbeatInterval is how often the leases of held jobs are
	// extended. Default Lease/3; it must be below Lease; negative disables
	// the heartbeat (a job that outlives its lease is then redelivered,
	// and its handler's context is cancelled with ErrLeaseStale at nine
	// tenths of the lease).
	HeartbeatInterval time.Duration
	// ReapInterval is how often this worker looks for expired leases.
	// Default Lease/3; negative disables reaping here.
	ReapInterval time.Duration
	// ForgetIdleQueues is how long a queue of the namespace may go unused
	// (no producer placed jobs in it, no worker served it) while it holds
	// nothing before this worker unlists it:
	// stats, the CLI, the dashboard and the metrics stop listing it, and
	// its next use lists it again. The worker looks when it starts (after
	// listing its own queues again), then every hour. Default 7 days;
	// at least an hour; negative: never.
	ForgetIdleQueues time.Duration
	// MaxIdle is the longest the worker sleeps without claiming when it
	// knows of no due job: a safety net for lost wake-up notices. Default 5s.
	MaxIdle time.Duration
	// ShutdownTimeout is how long Run lets in-flight jobs finish after its
	// context is cancelled before it cancels theirs and releases them.
	// Default 10s.
	ShutdownTimeout time.Duration

	// Retry is the policy for types and jobs that set none. Default
	// retry.Default(). A retry.Exponential here, or set on a registered
	// type with job.Retry, with a parameter out of range makes New fail
	// with an error that names it.
	Retry retry.Policy
	// Timeout is the handler deadline for types and jobs that set none.
	// 0 means none.
	Timeout time.Duration
	// Middleware wraps every handler, the first outermost. Inside it,
	// right around the handler, every attempt has the worker's own two:
	// its deadline (the job's, its type's or Options.Timeout, cause
	// middleware.ErrTimeout) and panic recovery (a panic fails the attempt
	// with a *middleware.PanicError), so middleware sees a timeout or a
	// panic as the attempt's error. nil and empty both add nothing to
	// those; the worker also recovers panics of the middleware itself.
	// Middleware learns each attempt's outcome through job.OnResult. The
	// chain wraps each type's handler once, when the worker first runs a
	// job of the type, and every attempt runs through it: a middleware
	// keeps per-attempt state in its handler's call, not in the closure it
	// returns. A nil entry is refused by New.
	Middleware []job.Middleware

	// Enqueue is producer middleware (job.EnqueueMiddleware, e.g.
	// middleware.EnqueueTracing and middleware.EnqueueMetrics) for the
	// next jobs of a succeeded job (job.Then, job.Next), the first
	// outermost: it sees them before they are stored, with the context
	// the handler ran with, so the span of middleware.Tracing is their
	// producer span's parent and a chain stays one trace. Its innermost
	// step enqueues those of other shards, records the ack (which stores
	// those of the job's shard) and returns once it is recorded, so the
	// middleware learns which were stored (an ack refused for a lost
	// lease stores none of the ack's). Middleware that refuses them fails
	// the attempt. It also sees the batch callbacks the worker's endings
	// and sweeps enqueue (broker.WithCallbackMiddleware). See
	// docs/observability.md, "Jobs that jobs enqueue". nil or empty: none,
	// and an attempt costs nothing more.
	Enqueue []job.EnqueueMiddleware

	// Services run alongside the worker: Run starts each in its own
	// goroutine, cancels their context when its own is cancelled (at the
	// start of the shutdown), and returns only after every one returned.
	// A service's error (or panic) is logged and does not stop the worker.
	// Use it for what shares the worker's life, e.g. a periodic
	// scheduler or an outbox relay. A nil entry is refused by New.
	Services []Service

	// Logger receives lifecycle events (info: start, stop, shutdown),
	// anomalies (warn: orphans removed, leases reaped or lost, unfinished
	// jobs released; error: Redis failures) and per-job decisions (debug).
	// One line per job outcome comes from middleware.Logging, not from here.
	// Default: warnings and errors as JSON lines on standard error (so
	// that the "queue not served" and eviction-policy warnings reach
	// someone); pass zerolog.Nop() for silence. Fields are listed in
	// docs/observability.md.
	Logger *zerolog.Logger

	// ProcessTTL is how long the worker's record in the process registry
	// (package fleet: `delayq workers ls`, the dashboard's processes page,
	// the "no live worker" flags) lives after its last heartbeat, which
	// comes every ProcessTTL/3. A worker killed without a clean stop drops
	// out of the registry ProcessTTL after its last beat. Default 15 s; at
	// least 100 ms; negative: the worker does not register.
	ProcessTTL time.Duration
	// OnDeadTrimmed, when set, is handed each dead record that the
	// dead-letter store of a served queue drops by its cap or max age
	// (broker.Options.DeadCap, DeadMaxAge): the whole record (envelope and
	// final error), why it was trimmed and when, for example to write it to
	// a table (docs/operations.md has a recipe for the outbox's
	// PostgreSQL). It is called from one goroutine of its own, at most once
	// per record, never on the path that records outcomes: a trim moves
	// the records to a bounded list in Redis (DeadTrimmedBuffer per shard),
	// which that goroutine empties into the hook. While the list is full (a
	// slow or stuck hook, no worker with the hook running) the records
	// trimmed are dropped and counted (job.QueueStats.DeadTrimmedUnarchived);
	// workers never wait for the hook. A record taken from the list by a
	// worker that then dies before its hook returns is not handed again.
	// Set it on every worker of the queue: trims by a worker without it
	// keep nothing (they are still counted). A panic of the hook is logged
	// and the record counts as handed.
	OnDeadTrimmed func(ctx context.Context, r *job.TrimmedRecord)
	// DeadTrimmedBuffer is how many trimmed records each shard keeps for
	// OnDeadTrimmed at most (each as large as its dead record). Default
	// 1000; ignored without OnDeadTrimmed.
	DeadTrimmedBuffer int
}

// Service is something that runs as long as a worker: Run blocks until ctx
// is cancelled (or it fails) and then returns. See Options.Services.
type Service interface {
	Run(ctx context.Context) error
}

// ServiceFunc adapts a function to [Service].
type ServiceFunc func(ctx context.Context) error

// Run calls f(ctx).
func (f ServiceFunc) Run(ctx context.Context) error { return f(ctx) }

// Defaults of Options, stated in its field docs.
const (
	defaultConcurrency     = 10
	defaultLease           = 30 * time.Second
	defaultMaxIdle         = 5 * time.Second
	defaultShutdownTimeout = 10 * time.Second
	// defaultForgetIdleQueues is Options.ForgetIdleQueues's default.
	defaultForgetIdleQueues = 7 * 24 * time.Hour
	// defaultDeadTrimmedBuffer is Options.DeadTrimmedBuffer's default.
	defaultDeadTrimmedBuffer = 1000
	maxBatch                 = 100
	// maxPrefetch bounds the adaptive prefetch (Options.Prefetch 0): one
	// claim's batch.
	maxPrefetch = maxBatch
)

func (c Options) withDefaults() (Options, error) {
	if c.Broker == nil {
		return c, errors.New("worker: Options.Broker is required")
	}
	if c.Registry == nil {
		return c, errors.New("worker: Options.Registry is required")
	}
	if len(c.Queues) == 0 {
		for _, q := range c.Registry.Table(registry.Key{}).Queues(naming.DefaultQueue) {
			c.Queues = append(c.Queues, Queue{Name: q})
		}
	}
	if len(c.Queues) == 0 {
		c.Queues = []Queue{{Name: naming.DefaultQueue}}
	}
	for i, svc := range c.Services {
		if svc == nil {
			return c, fmt.Errorf("worker: Options.Services[%d] is nil", i)
		}
	}
	c.Services = append([]Service(nil), c.Services...)
	for i, mw := range c.Enqueue {
		if mw == nil {
			return c, fmt.Errorf("worker: Options.Enqueue[%d] is nil", i)
		}
	}
	c.Enqueue = append([]job.EnqueueMiddleware(nil), c.Enqueue...)
	for i, mw := range c.Middleware {
		if mw == nil {
			return c, fmt.Errorf("worker: Options.Middleware[%d] is nil", i)
		}
	}
	// The worker's own two, innermost (see Options.Middleware).
	c.Middleware = slices.Concat(c.Middleware, []job.Middleware{guard.Timeout(0), guard.Recover()})
	seen := make(map[string]bool, len(c.Queues))
	c.Queues = append([]Queue(nil), c.Queues...)
	for i, q := range c.Queues {
		if err := naming.Queue(q.Name); err != nil {
			return c, fmt.Errorf("worker: %w", err)
		}
		if seen[q.Name] {
			return c, fmt.Errorf("worker: queue %q is listed twice", q.Name)
		}
		seen[q.Name] = true
		if q.Weight < 0 {
			return c, fmt.Errorf("worker: queue %q has negative weight %d", q.Name, q.Weight)
		}
		if q.Weight == 0 {
			c.Queues[i].Weight = 1
		}
	}
	neg := func(name string, d time.Duration) error {
		return fmt.Errorf("worker: %s %s is negative", name, d)
	}
	switch {
	case c.ProcessTTL > 0 && c.ProcessTTL < fleetreg.MinTTL:
		return c, fmt.Errorf("worker: ProcessTTL %s is below the minimum %s (negative: not registered)", c.ProcessTTL, fleetreg.MinTTL)
	case c.Concurrency < 0:
		return c, fmt.Errorf("worker: Concurrency %d is negative", c.Concurrency)
	case c.BatchSize < 0:
		return c, fmt.Errorf("worker: BatchSize %d is negative", c.BatchSize)
	case c.Lease < 0:
		return c, neg("Lease", c.Lease)
	case c.MaxIdle < 0:
		return c, neg("MaxIdle", c.MaxIdle)
	case c.ShutdownTimeout < 0:
		return c, neg("ShutdownTimeout", c.ShutdownTimeout)
	case c.Timeout < 0:
		return c, neg("Timeout", c.Timeout)
	case c.DeadTrimmedBuffer < 0:
		return c, fmt.Errorf("worker: DeadTrimmedBuffer %d is negative", c.DeadTrimmedBuffer)
	}
	if c.DeadTrimmedBuffer == 0 {
		c.DeadTrimmedBuffer = defaultDeadTrimmedBuffer
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.BatchSize == 0 {
		c.BatchSize = min(c.Concurrency+c.mostAhead(), maxBatch)
	}
	if c.Lease == 0 {
		c.Lease = defaultLease
	}
	if c.Lease < 10*time.Millisecond {
		return c, fmt.Errorf("worker: Lease %s is below 10ms", c.Lease)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Lease / 3
	}
	if c.HeartbeatInterval >= c.Lease {
		return c, fmt.Errorf("worker: HeartbeatInterval %s is not below Lease %s: every job that runs longer than the lease would lose it and run twice; leave it 0 for Lease/3", c.HeartbeatInterval, c.Lease)
	}
	switch {
	case c.ForgetIdleQueues == 0:
		c.ForgetIdleQueues = defaultForgetIdleQueues
	case c.ForgetIdleQueues > 0 && c.ForgetIdleQueues < admin.MinForgetIdle:
		return c, fmt.Errorf("worker: %w: Options.ForgetIdleQueues %s is below %s (negative: never)", job.ErrInvalid, c.ForgetIdleQueues, admin.MinForgetIdle)
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = c.Lease / 3
	}
	if c.MaxIdle == 0 {
		c.MaxIdle = defaultMaxIdle
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = defaultShutdownTimeout
	}
	if c.Retry == nil {
		c.Retry = retry.Default()
	}
	if err := checkPolicy(c.Retry); err != nil {
		return c, fmt.Errorf("worker: %w: Options.Retry: %v", job.ErrInvalid, err)
	}
	t := c.Registry.Table(registry.Key{})
	for _, typ := range t.Types() {
		if e, _ := t.Lookup(typ); e.Retry != nil {
			if err := checkPolicy(e.Retry); err != nil {
				return c, fmt.Errorf("worker: %w: type %q: job.Retry: %v", job.ErrInvalid, typ, err)
			}
		}
	}
	if c.Logger == nil {
		l := zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Str("component", "delayq.worker").Logger()
		c.Logger = &l
	}
	return c, nil
}

// mostAhead is the most jobs the worker may hold beyond Concurrency:
// Prefetch when fixed, maxPrefetch when adaptive, 0 when off.
func (c Options) mostAhead() int {
	switch {
	case c.Prefetch > 0:
		return c.Prefetch
	case c.Prefetch == 0:
		return maxPrefetch
	}
	return 0
}

// checkPolicy checks the parameters of an exponential policy; other
// policies are the user's own.
func checkPolicy(p retry.Policy) error {
	switch e := p.(type) {
	case retry.Exponential:
		return retrycheck.Exponential(e.Initial, e.Multiplier, e.Max, e.Jitter)
	case *retry.Exponential:
		if e != nil {
			return retrycheck.Exponential(e.Initial, e.Multiplier, e.Max, e.Jitter)
		}
	}
	return nil
}
