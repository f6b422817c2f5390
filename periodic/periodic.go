package periodic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/refusal"
	"github.com/delayq/delayq/internal/tickid"
	"github.com/delayq/delayq/job"
)

// Headers a tick's job carries: the schedule's name and the tick's time
// (RFC 3339, UTC), and headerSignature. [Outcomes] reads them.
const (
	headerSchedule = "delayq-periodic"
	headerTick     = "delayq-periodic-tick"
)

// maxNameLen is the longest schedule name, in bytes.
const maxNameLen = 128

// Defaults of Options.
const (
	defaultTolerance  = 5 * time.Second
	defaultHeartbeat  = 30 * time.Second
	defaultStaleAfter = 5 * time.Minute
	defaultPoll       = time.Second
)

// defaultMissedWithin is the window of the default missed-tick policy,
// RunMissedOnce(defaultMissedWithin): after a scheduler was away, one job
// for the ticks it missed, if the latest of them is at most an hour old.
const defaultMissedWithin = time.Hour

// maxCatchUp is the most ticks of one schedule a step enqueues; a
// RunMissedAll catch-up of more goes on at once in further steps.
const maxCatchUp = 1000

// Options configures a Scheduler. The zero value is usable: every field has
// a documented default.
type Options struct {
	// Tolerance is how late a running scheduler may reach a tick and still
	// count as on time: a scheduler that wakes a little late (a pause, a
	// slow reply, Redis unreachable for a moment) enqueues every tick it
	// reached within Tolerance of its time. A tick reached later than
	// that, and every tick due before the scheduler started, was missed
	// while the scheduler was away: the schedule's missed-tick policy
	// decides which of them run ([RunMissedOnce], the default, runs one).
	// Tolerance plus five minutes is also how long a tick's job id is
	// remembered after the job ended. Default 5 s; it must not be
	// negative.
	Tolerance time.Duration

	// Heartbeat is how often the scheduler writes its schedules to Redis
	// (their next run and "seen" time) and removes stale schedules that it
	// does not declare. Default 30s.
	Heartbeat time.Duration

	// StaleAfter is how long after its last heartbeat a schedule counts as
	// stale: no running scheduler declares it (an old deploy left it
	// behind). A stale schedule is shown as such, and the next scheduler
	// that does not declare it removes it; none runs it. Default 5 minutes;
	// it must be at least twice Heartbeat.
	StaleAfter time.Duration

	// Clock, when set, replaces the scheduler's clock. Only tests with a
	// simulated clock set it; production leaves it nil, and the scheduler
	// follows the Redis server's TIME (read at start and every heartbeat),
	// the clock the broker's scripts use.
	Clock func() time.Time

	// Poll is how often a running scheduler reads the paused schedules
	// ([Pause]) and the run-now requests ([RunNow]) between ticks: a
	// request is enqueued at most Poll after it was made. Default 1 s; it
	// must not be negative.
	Poll time.Duration

	// Logger receives start and stop (info), ticks enqueued (debug), and
	// Redis errors (error). Default zerolog.Nop().
	Logger *zerolog.Logger

	// ProcessTTL is how long the scheduler's entry in the process registry
	// (package fleet: `delayq workers ls`, the dashboard's processes page)
	// lives after each of its heartbeats, which come every ProcessTTL/3
	// while Run runs: a scheduler killed with SIGKILL is gone from the list
	// ProcessTTL after its last one. Default 15 s; at least 100 ms;
	// negative: not registered.
	ProcessTTL time.Duration

	// Enqueue is producer middleware (job.EnqueueMiddleware, e.g.
	// middleware.EnqueueTracing and middleware.EnqueueMetrics) for the
	// jobs of the ticks, the first outermost: each tick's job gets a
	// producer span and is counted once stored. Every scheduler enqueues
	// every tick and all but one are refused as duplicates
	// (broker.ErrDuplicate): those are expected (the producer middleware sees them so),
	// not errors on their spans, and not counted. A nil entry is refused
	// by New.
	Enqueue []job.EnqueueMiddleware
}

// Scheduler enqueues the jobs of the schedules added to it, one job per
// tick, however many processes run a Scheduler with the same schedules,
// whatever queue each declares: a tick's job has an id made of the
// schedule's name and the tick's time (name@T, T in UTC to the second,
// "nightly-report@2030-01-02T01:30:00Z"), goes to the queue of the
// first scheduler that claimed the tick, and the broker refuses a second
// job with that id there (see docs/periodic.md). There is no leader: every
// scheduler enqueues every tick, and all but one are refused.
type Scheduler struct {
	b    *broker.Broker
	enq  job.Enqueuer // b in Options.Enqueue
	cfg  Options
	keys keyspace.PeriodicKeys
	log  zerolog.Logger

	mu      sync.Mutex
	entries []*entry
	started bool

	offset time.Duration // server clock - local clock, when Clock is nil
	secret []byte        // the periodic key, read at every heartbeat
	runs   []pendingRun  // the run-now requests of its schedules, read at each step
}

// pendingRun is a run-now request a step found pending.
type pendingRun struct {
	id string
	r  run
}

// ErrStarted is returned by [Add] once the scheduler runs, and by a second
// [Scheduler.Run].
var ErrStarted = errors.New("periodic: scheduler already running")

// New returns a Scheduler that enqueues through b. It checks cfg but does
// not contact Redis.
func New(b *broker.Broker, cfg Options) (*Scheduler, error) {
	if b == nil {
		return nil, fmt.Errorf("periodic: %w: nil broker", job.ErrInvalid)
	}
	if cfg.Tolerance < 0 || cfg.Heartbeat < 0 || cfg.StaleAfter < 0 || cfg.Poll < 0 {
		return nil, fmt.Errorf("periodic: %w: Tolerance %s, Heartbeat %s, StaleAfter %s and Poll %s must not be negative", job.ErrInvalid, cfg.Tolerance, cfg.Heartbeat, cfg.StaleAfter, cfg.Poll)
	}
	if cfg.Poll == 0 {
		cfg.Poll = defaultPoll
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = defaultTolerance
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = defaultHeartbeat
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = max(defaultStaleAfter, 2*cfg.Heartbeat)
	}
	if cfg.ProcessTTL > 0 && cfg.ProcessTTL < fleetreg.MinTTL {
		return nil, fmt.Errorf("periodic: %w: ProcessTTL %s is below the minimum %s (negative: not registered)", job.ErrInvalid, cfg.ProcessTTL, fleetreg.MinTTL)
	}
	if cfg.StaleAfter < 2*cfg.Heartbeat {
		return nil, fmt.Errorf("periodic: %w: StaleAfter %s is less than twice Heartbeat %s", job.ErrInvalid, cfg.StaleAfter, cfg.Heartbeat)
	}
	for i, mw := range cfg.Enqueue {
		if mw == nil {
			return nil, fmt.Errorf("periodic: %w: Options.Enqueue[%d] is nil", job.ErrInvalid, i)
		}
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	enq := job.ChainEnqueuer(b, cfg.Enqueue...)
	cfg.Enqueue = nil // in enq
	return &Scheduler{b: b, enq: enq, cfg: cfg, keys: keyspace.Periodic(b.Namespace()), log: log}, nil
}

// missPolicy is a schedule's policy for the ticks it missed: those due
// while no scheduler was there to enqueue them on time (every scheduler was
// down, stalled or cut off from Redis for longer than Options.Tolerance,
// or had not started yet). Whatever the policy, a scheduler that comes
// back enqueues at most one job for its absence, unless the policy is
// missAll. The options [SkipMissed], [RunMissedOnce] and [RunMissedAll]
// set it; Status.Missed shows it by its String.
type missPolicy uint8

const (
	// missSkip drops missed ticks: the schedule goes on with its next tick
	// (a tick reached within Options.Tolerance of its time is not missed,
	// and runs).
	missSkip missPolicy = iota
	// missOnce enqueues one job for all the missed ticks: the latest of
	// them, with that tick's id, ready at once, if it is no older than the
	// policy's window. The default, with defaultMissedWithin.
	missOnce
	// missAll enqueues a job for every missed tick no older than the
	// policy's window, oldest first, up to maxCatchUp per step.
	missAll
)

// String is the policy's name in Status.Missed: "skip", "once" or "all".
func (m missPolicy) String() string {
	switch m {
	case missOnce:
		return "once"
	case missAll:
		return "all"
	}
	return "skip"
}

// parseMissed reads a policy as String writes it.
func parseMissed(s string) missPolicy {
	for _, m := range []missPolicy{missOnce, missAll} {
		if s == m.String() {
			return m
		}
	}
	return missSkip
}

// Option configures one schedule.
type Option func(*entry) error

// Location sets the schedule's time zone. The default is UTC, so that
// every process reads the expression alike whatever its local zone. Load a
// zone by its IANA name with [time.LoadLocation], whose error names an
// unknown zone:
//
//	berlin, err := time.LoadLocation("Europe/Berlin")
//	if err != nil {
//		return err // unknown time zone Europe/Berlin
//	}
//	err = periodic.Add(s, "nightly-report", "30 2 * * *", Report, args, periodic.Location(berlin))
func Location(loc *time.Location) Option {
	return func(e *entry) error {
		if loc == nil {
			return errors.New("time zone is a nil *time.Location")
		}
		e.loc = loc
		return nil
	}
}

// SkipMissed sets the "skip" policy: ticks missed while every scheduler was
// away are not run; the schedule goes on with its next tick.
func SkipMissed() Option {
	return func(e *entry) error { e.missed, e.within = missSkip, 0; return nil }
}

// RunMissedOnce sets the "once" policy (the default, within an hour):
// when ticks were missed, one job runs for them all (the latest missed
// tick's), provided that tick is no older than within when a scheduler
// comes back. within must be positive.
func RunMissedOnce(within time.Duration) Option {
	return func(e *entry) error {
		if within <= 0 {
			return fmt.Errorf("RunMissedOnce window %s is not positive", within)
		}
		e.missed, e.within = missOnce, within
		return nil
	}
}

// RunMissedAll sets the "all" policy: when ticks were missed, a job runs
// for each of them no older than within when a scheduler comes back,
// oldest first, each with its own tick's id (a burst: a minute away from
// an every-second schedule is 60 jobs at once). within must be positive.
func RunMissedAll(within time.Duration) Option {
	return func(e *entry) error {
		if within <= 0 {
			return fmt.Errorf("RunMissedAll window %s is not positive", within)
		}
		e.missed, e.within = missAll, within
		return nil
	}
}

// JobOptions are applied to every job of the schedule (e.g. job.Queue,
// job.MaxRetries, job.Timeout, job.Header). The scheduler sets the job's
// id and ready time itself, so job.ID, job.In and job.At are refused.
func JobOptions(opts ...job.Option) Option {
	return func(e *entry) error {
		e.opts = append(e.opts, opts...)
		return nil
	}
}

// entry is one schedule.
type entry struct {
	name, spec string
	loc        *time.Location
	sched      schedule
	missed     missPolicy
	within     time.Duration
	opts       []job.Option
	typ, queue string
	build      func(opts ...job.Option) (*job.Envelope, error)

	cur    time.Time // the latest tick this process dealt with
	paused bool      // paused (Pause), as read at the step's start
	// away: the ticks after cur were due while this process was not
	// running (it has just started), so they were missed.
	away bool

	// When a refused tick was last logged (zero once a tick is enqueued
	// again), and how many were refused since: a schedule whose every
	// tick is refused logs once per Heartbeat, not once per tick.
	refusedAt time.Time
	refused   int
	// The same for ticks claimed for another queue than e.queue.
	movedAt time.Time
	moved   int
}

// tickJob builds and checks the job of e's tick at: its id, ready time,
// uniqueness and headers, then every check of the broker's enqueue that
// does not need Redis (job.Prepare, at now). An error says why the tick's
// job cannot be enqueued; it wraps job.ErrInvalid.
func (e *entry) tickJob(at, now time.Time, unique time.Duration) (*job.Envelope, error) {
	opts := []job.Option{job.ID(tickID(e.name, at)), job.At(at),
		job.Header(headerSchedule, e.name), job.Header(headerTick, at.UTC().Format(tickLayout))}
	if unique > 0 {
		opts = append(opts, job.Unique(unique), job.UniqueIncludeDead())
	}
	env, err := e.build(opts...)
	if err != nil {
		return nil, err
	}
	if err := job.Prepare(env, now); err != nil {
		return nil, err
	}
	return env, nil
}

// Add declares a schedule named name (1 to 128 bytes of ASCII letters,
// digits and '.', '_', '-', ':', '/') on s: a job of type t with args at
// every tick of spec, a cron expression with 5 fields (minute hour
// day-of-month month day-of-week), 6 with a leading seconds field, a
// descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or "@every
// <duration>" (whole seconds, ticking at the multiples of the duration
// since the Unix epoch).
// The expression is read in the schedule's time zone (UTC unless [Zone] or
// [Location] says otherwise).
//
// Add checks everything before it keeps anything: a bad name, expression,
// time zone or option, arguments that do not encode, or a name already
// added give an error that wraps job.ErrInvalid and names the schedule.
// Nothing is written to Redis until [Scheduler.Run]. Add refuses with
// ErrStarted once s runs.
func Add[T any](s *Scheduler, name, spec string, t *job.Type[T], args T, opts ...Option) error {
	if err := validateName(name); err != nil {
		return err
	}
	bad := func(err error) error { return fmt.Errorf("periodic: %w: schedule %q: %v", job.ErrInvalid, name, err) }
	if t == nil {
		return bad(errors.New("nil job type"))
	}
	e := &entry{name: name, spec: spec, loc: time.UTC, missed: missOnce, within: defaultMissedWithin}
	for _, o := range opts {
		if o == nil {
			return bad(errors.New("nil option"))
		}
		if err := o(e); err != nil {
			return bad(err)
		}
	}
	sched, err := parseSpec(spec, e.loc)
	if err != nil {
		return bad(err)
	}
	e.sched = sched
	jobOpts := slices.Clip(e.opts)
	env, err := t.Envelope(args, jobOpts...)
	if err != nil {
		return bad(err)
	}
	if env.ID != "" || env.Delay != 0 || !env.At.IsZero() {
		return bad(errors.New("job options ID, In and At are set by the scheduler, not by the schedule"))
	}
	if env.Replace {
		return bad(errors.New("job option Replace would let a second scheduler replace a tick's job instead of being refused"))
	}
	e.typ, e.queue = env.Type, env.Queue
	e.build = func(extra ...job.Option) (*job.Envelope, error) {
		return t.Envelope(args, append(jobOpts, extra...)...)
	}
	// A tick's job as the scheduler would enqueue it, for a tick due now:
	// what is wrong with it already (an expiry that passed, a header the
	// broker refuses) is refused here rather than at every tick. An
	// expiry that passes later is the scheduler's to report, tick by tick.
	if now := time.Now(); sched.Next(now).IsZero() {
		return bad(fmt.Errorf("cron expression %q has no tick after %s", spec, now.UTC().Format(time.RFC3339)))
	} else if _, err := e.tickJob(now.Truncate(time.Second), now, 0); err != nil {
		return bad(fmt.Errorf("the job of a tick due now: %w", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("schedule %q: %w", name, ErrStarted)
	}
	for _, o := range s.entries {
		if o.name == name {
			return bad(errors.New("a schedule with that name was added already"))
		}
	}
	s.entries = append(s.entries, e)
	return nil
}

// validateName checks a schedule name: 1 to maxNameLen bytes of ASCII
// letters, digits and '.', '_', '-', ':', '/'.
func validateName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("periodic: %w: schedule name %q must be 1 to %d bytes long", job.ErrInvalid, name, maxNameLen)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == ':', r == '/':
		default:
			return fmt.Errorf("periodic: %w: schedule name %q contains %q; allowed are letters, digits and '._-:/'", job.ErrInvalid, name, r)
		}
	}
	return nil
}

// tickLayout is the tick's time in ids and headers: UTC, whole seconds
// (cron's resolution).
const tickLayout = tickid.Layout

// tickID returns the job id of the tick at t of the schedule name:
// "name@2030-01-02T03:04:05Z" (the tick's time in UTC).
func tickID(name string, t time.Time) string { return tickid.ID(name, t) }

// uniqueness is how long a tick's id is remembered after its job ended
// (job.Unique, also after a dead ending): longer than any scheduler tries
// the tick.
func (s *Scheduler) uniqueness() time.Duration { return s.cfg.Tolerance + 5*time.Minute }

// now is the scheduler's clock.
func (s *Scheduler) now() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock()
	}
	return time.Now().Add(s.offset)
}

// Run syncs the schedules to Redis, then enqueues their ticks until ctx is
// cancelled, and returns nil. Redis errors are logged and retried, never
// returned: a scheduler cut off from Redis catches up when it is back
// (within Options.Tolerance, else by each schedule's missed-tick policy).
// Run without schedules returns at once. A second call returns ErrStarted.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return ErrStarted
	}
	s.started = true
	entries := s.entries
	s.mu.Unlock()
	if len(entries) == 0 {
		return nil
	}
	s.log.Info().Int("schedules", len(entries)).Msg("scheduler started")
	defer s.log.Info().Msg("scheduler stopped")
	if stop := s.register(ctx, entries); stop != nil {
		defer stop()
	}

	// Start: the clock, the schedules in Redis, where each one left off.
	for {
		err := s.start(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		s.log.Error().Err(err).Msg("scheduler cannot sync its schedules; retrying")
		if !sleep(ctx, time.Second) {
			return nil
		}
	}
	beat := s.now().Add(s.cfg.Heartbeat)
	for {
		wake, err := s.step(ctx, s.now())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error().Err(err).Msg("scheduler cannot enqueue ticks; retrying")
			wake = s.now().Add(time.Second)
		}
		if now := s.now(); !now.Before(beat) {
			if err := s.heartbeat(ctx); err != nil && ctx.Err() == nil {
				s.log.Error().Err(err).Msg("scheduler heartbeat failed")
			}
			beat = now.Add(s.cfg.Heartbeat)
		}
		if beat.Before(wake) {
			wake = beat
		}
		if poll := s.now().Add(s.cfg.Poll); poll.Before(wake) {
			wake = poll
		}
		if !sleep(ctx, wake.Sub(s.now())) {
			return nil
		}
	}
}

// register keeps the scheduler in the process registry (package fleet)
// until ctx is done; the returned func waits for its deregistration. It is
// nil when Options.ProcessTTL is negative.
func (s *Scheduler) register(ctx context.Context, entries []*entry) func() {
	if s.cfg.ProcessTTL < 0 {
		return nil
	}
	var types, names []string
	for _, e := range entries {
		if !slices.Contains(types, e.typ) {
			types = append(types, e.typ)
		}
		names = append(names, e.name)
	}
	slices.Sort(types)
	slices.Sort(names)
	list := strings.Join(names, ",")
	if len(list) > 1000 {
		list = list[:1000] + "…"
	}
	reg, err := fleetreg.New(s.b.Client(), s.b.Namespace(), fleet.Process{
		Role:  fleet.RoleScheduler,
		Types: types,
		Info:  map[string]string{"schedules": strconv.Itoa(len(entries)), "names": list},
	}, fleetreg.Options{TTL: s.cfg.ProcessTTL, OnError: func(err error) {
		s.log.Warn().Err(err).Msg("scheduler cannot record itself in the process registry")
	}})
	if err != nil {
		s.log.Error().Err(err).Msg("scheduler not registered")
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = reg.Run(rctx) }()
	return func() { cancel(); <-done }
}

// start reads the server's clock, writes the schedules and reads where
// each left off.
func (s *Scheduler) start(ctx context.Context) error {
	if err := s.syncClock(ctx); err != nil {
		return err
	}
	if err := s.heartbeat(ctx); err != nil {
		return err
	}
	return s.resume(ctx, s.now())
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// due returns the ticks of e to enqueue at now, and where its cursor
// goes once they are dealt with: now, or the last tick returned when a
// catch-up goes on in further steps.
//
// Every tick after the cursor is due. When the first of them is at most
// tol old and the scheduler did not just start, the scheduler was there
// and is only a little late: they all run. Otherwise they were missed,
// and the schedule's policy says which run: missSkip the latest if it is at
// most tol old (it is on time), missOnce the latest if it is within its
// window, missAll all within its window.
func (e *entry) due(now time.Time, tol time.Duration) ([]time.Time, time.Time) {
	first := e.sched.Next(e.cur)
	if first.IsZero() || first.After(now) {
		return nil, now
	}
	from := e.cur
	if e.away || now.Sub(first) > tol {
		switch e.missed {
		case missAll:
			if w := now.Add(-e.within); from.Before(w) {
				from = w
			}
		default:
			window := tol
			if e.missed == missOnce {
				window = max(window, e.within)
			}
			if t := latest(e.sched, e.cur, now); !t.IsZero() && now.Sub(t) <= window {
				return []time.Time{t}, now
			}
			return nil, now
		}
	}
	var out []time.Time
	for t := e.sched.Next(from); !t.IsZero() && !t.After(now); t = e.sched.Next(t) {
		if len(out) == maxCatchUp {
			return out, out[len(out)-1]
		}
		out = append(out, t)
	}
	return out, now
}

// tick is one tick of one schedule in a step, and what became of it.
type tick struct {
	e   *entry
	at  time.Time
	env *job.Envelope
	err error // why it was not enqueued; nil when it was
	// invalid: err says why its job can never be enqueued (it does not
	// build, or the broker refused it as invalid).
	invalid bool
	// run: the run-now request this job is for (at is its time); nil
	// for a tick.
	run *pendingRun
}

// step enqueues the due ticks of every schedule and returns when the next
// tick is due (at most a Heartbeat ahead). A tick whose job cannot be
// built, or that the broker refuses as invalid, is reported (logged with
// the schedule's name and why, and stored as the schedule's last outcome,
// "refused") and skipped: it holds up neither its schedule's later ticks
// nor any other schedule's. The error returned is a Redis error; the
// ticks it left undecided are tried again at the next step.
func (s *Scheduler) step(ctx context.Context, now time.Time) (time.Time, error) {
	if err := s.catchUp(ctx, false); err != nil {
		return now.Add(time.Second), err
	}
	return s.enqueueDue(ctx, now)
}

// enqueueDue is step after its catch-up: it enqueues the ticks due after
// the schedules' cursors.
func (s *Scheduler) enqueueDue(ctx context.Context, now time.Time) (time.Time, error) {
	var ticks, ready []*tick
	upTo := make(map[*entry]time.Time, len(s.entries))
	more := false
	paused := map[*entry]time.Time{}
	for _, e := range s.entries {
		if e.paused {
			// Every due tick is passed, not enqueued; the latest is
			// recorded as skipped.
			if t := latest(e.sched, e.cur, now); !t.IsZero() {
				paused[e] = t
			}
			upTo[e] = now
			continue
		}
		due, to := e.due(now, s.cfg.Tolerance)
		upTo[e] = to
		more = more || to.Before(now)
		for _, at := range due {
			tk := &tick{e: e, at: at}
			tk.env, tk.err = e.tickJob(at, now, s.uniqueness())
			tk.invalid = tk.err != nil
			ticks = append(ticks, tk)
			if !tk.invalid {
				ready = append(ready, tk)
			}
		}
	}
	byName := make(map[string]*entry, len(s.entries))
	for _, e := range s.entries {
		byName[e.name] = e
	}
	for i := range s.runs {
		pr := &s.runs[i]
		e := byName[pr.r.Name]
		tk := &tick{e: e, at: fromMS(pr.r.Requested), run: pr}
		tk.env, tk.err = e.runJob(pr.id, pr.r, now, s.uniqueness())
		tk.invalid = tk.err != nil
		ticks = append(ticks, tk)
		if !tk.invalid {
			ready = append(ready, tk)
		}
	}
	if err := s.claim(ctx, now, ready); err != nil {
		for _, tk := range ready {
			tk.err = err
		}
		ready = nil
	}
	s.enqueue(ctx, ready)

	var (
		failed   error
		refused  []*tick
		stuck    = map[*entry]bool{}
		enqueued = map[string]time.Time{}
	)
	var runs []any
	for _, tk := range ticks {
		if tk.run != nil {
			r := tk.run.r
			switch err := tk.err; {
			case err == nil || errors.Is(err, broker.ErrDuplicate):
				r.State, r.Queue = RunEnqueued, tk.env.Queue
				if err == nil {
					s.log.Info().Str("schedule", tk.e.name).Str("job_id", tk.env.ID).Str("queue", tk.env.Queue).Msg("run-now request enqueued")
				}
			case tk.invalid || errors.Is(err, job.ErrInvalid):
				r.State, r.Error = RunRefused, truncate(err.Error(), 512)
				s.log.Error().Str("schedule", tk.e.name).Str("job_id", tk.run.id).Str("reason", r.Error).Msg("the job of a run-now request cannot be enqueued")
			default:
				if failed == nil {
					failed = fmt.Errorf("schedule %q, run-now request %s: %w", tk.e.name, tk.run.id, err)
				}
				continue // pending: tried again at the next step
			}
			body, err := json.Marshal(r)
			if err != nil {
				return now, err
			}
			runs = append(runs, tk.run.id, body)
			continue
		}
		switch err := tk.err; {
		case stuck[tk.e]:
			continue
		case err == nil || errors.Is(err, broker.ErrDuplicate):
			// Enqueued, by this scheduler or another (or it ran already).
			if err == nil {
				s.log.Debug().Str("schedule", tk.e.name).Str("job_id", tk.env.ID).Str("queue", tk.env.Queue).Msg("tick enqueued")
			}
			tk.e.refusedAt, tk.e.refused = time.Time{}, 0
			if tk.at.After(enqueued[tk.e.name]) {
				enqueued[tk.e.name] = tk.at
			}
		case tk.invalid || errors.Is(err, job.ErrInvalid):
			refused = append(refused, tk)
		default:
			// Not decided: tried again at the next step, with the
			// schedule's later ticks.
			stuck[tk.e] = true
			if failed == nil {
				failed = fmt.Errorf("schedule %q, tick %s: %w", tk.e.name, tk.at.UTC().Format(tickLayout), err)
			}
			continue
		}
		if tk.at.After(tk.e.cur) {
			tk.e.cur = tk.at
		}
	}
	for _, e := range s.entries {
		// Every due tick was dealt with: the ones the policy dropped
		// are passed too.
		if !stuck[e] {
			if upTo[e].After(e.cur) {
				e.cur = upTo[e]
			}
			e.away = false
		}
	}
	if err := s.recordLast(ctx, enqueued); err != nil && failed == nil {
		failed = err
	}
	if len(runs) > 0 {
		if err := s.b.Client().HSet(ctx, s.keys.Runs, runs...).Err(); err != nil && failed == nil {
			failed = fmt.Errorf("recording run-now requests enqueued: %w", err)
		}
	}
	s.runs = nil
	if err := s.recordPaused(ctx, now, paused); err != nil && failed == nil {
		failed = err
	}
	if err := s.refuse(ctx, now, refused); err != nil && failed == nil {
		failed = err
	}
	if more && failed == nil {
		return now, nil // a missAll catch-up goes on
	}
	wake := now.Add(s.cfg.Heartbeat)
	for _, e := range s.entries {
		if n := e.sched.Next(now); !n.IsZero() && n.Before(wake) {
			wake = n
		}
	}
	return wake, failed
}

// claim decides, for each tick, the queue its job goes to: the queue of
// the first scheduler of the namespace to reach the tick, whatever queue
// the others declare. One MULTI of HSETNX and HGET per tick on the ticks
// hash: a scheduler that finds a tick claimed for another queue enqueues
// its job there too (the broker refuses it as a duplicate when the job is
// there already; it stores it when the first scheduler died before its
// enqueue), so that a schedule moved to another queue by a rolling deploy
// runs each tick once. See docs/periodic.md.
func (s *Scheduler) claim(ctx context.Context, now time.Time, ticks []*tick) error {
	if len(ticks) == 0 {
		return nil
	}
	owner := make([]*redis.StringCmd, len(ticks))
	if _, err := s.b.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, tk := range ticks {
			keep := s.uniqueness()
			if tk.e.missed != missSkip {
				keep = max(keep, tk.e.within)
			}
			p.HSetNX(ctx, s.keys.Ticks, tk.env.ID, strconv.FormatInt(now.Add(keep).UnixMilli(), 10)+" "+tk.env.Queue)
			owner[i] = p.HGet(ctx, s.keys.Ticks, tk.env.ID)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("claiming ticks: %w", err)
	}
	for i, tk := range ticks {
		_, q, ok := strings.Cut(owner[i].Val(), " ")
		switch {
		case !ok || naming.Queue(q) != nil:
			// Not a claim a scheduler wrote: the tick goes to this
			// scheduler's queue.
			s.log.Warn().Str("schedule", tk.e.name).Str("tick", tk.at.UTC().Format(tickLayout)).Str("claim", truncate(owner[i].Val(), 100)).
				Msg("the stored claim of a tick is unreadable; the tick's job goes to this scheduler's queue")
		case q != tk.env.Queue:
			e := tk.e
			e.moved++
			if e.movedAt.IsZero() || !now.Before(e.movedAt.Add(s.cfg.Heartbeat)) {
				s.log.Warn().Str("schedule", e.name).Str("tick", tk.at.UTC().Format(tickLayout)).Str("queue", tk.env.Queue).Str("claimed_queue", q).
					Int("ticks_since_last_line", e.moved).
					Msg("another scheduler declares this schedule on another queue and reached the tick first; its job goes to that queue, once")
				e.movedAt, e.moved = now, 0
			}
			tk.env.Queue = q
		}
		tk.env.Headers[headerSignature] = sign(s.secret, tk.env.ID, tk.env.Queue)
	}
	return nil
}

// enqueue enqueues the jobs of ticks in one call, and sets each tick's
// err. When the broker refuses the call whole (one job it finds invalid
// refuses them all, and nothing is written), it enqueues them one by one,
// so that the one bad job is refused alone.
func (s *Scheduler) enqueue(ctx context.Context, ticks []*tick) {
	if len(ticks) == 0 {
		return
	}
	envs := make([]*job.Envelope, len(ticks))
	for i, tk := range ticks {
		envs[i] = tk.env
	}
	// A duplicate is another scheduler's tick, or this one's again.
	ctx = refusal.Expect(ctx, isDuplicate)
	err := s.enq.Enqueue(ctx, envs...)
	var be *job.BatchError
	switch {
	case err == nil:
	case len(ticks) == 1:
		ticks[0].err = err
	case errors.As(err, &be) && len(be.Errs) == len(ticks):
		for i, tk := range ticks {
			tk.err = be.Errs[i]
		}
	default:
		for _, tk := range ticks {
			tk.err = s.enq.Enqueue(ctx, tk.env)
		}
	}
}

func isDuplicate(err error) bool { return errors.Is(err, broker.ErrDuplicate) }

// refuse reports ticks whose jobs cannot be enqueued: each schedule's
// latest refusal becomes its last outcome ("refused", with why), and is
// logged: the first of a run of refusals, then one line per Heartbeat
// that says how many were refused since the last line.
func (s *Scheduler) refuse(ctx context.Context, now time.Time, ticks []*tick) error {
	if len(ticks) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(ticks))
	for _, tk := range ticks {
		e, why := tk.e, tk.err.Error()
		e.refused++
		if e.refusedAt.IsZero() || !now.Before(e.refusedAt.Add(s.cfg.Heartbeat)) {
			s.log.Error().Str("schedule", e.name).Str("tick", tk.at.UTC().Format(tickLayout)).Str("queue", e.queue).
				Str("reason", why).Int("refused_since_last_line", e.refused).
				Msg("the job of a tick cannot be enqueued; the tick is skipped, the other schedules go on")
			e.refused, e.refusedAt = 0, now
		}
		body, err := json.Marshal(outcome{Result: ResultRefused, Tick: tk.at.UnixMilli(), At: now.UnixMilli(), Error: truncate(why, 512)})
		if err != nil {
			return err
		}
		fields = append(fields, e.name, body)
	}
	if err := s.b.Client().HSet(ctx, s.keys.Outcomes, fields...).Err(); err != nil {
		return fmt.Errorf("recording refused ticks: %w", err)
	}
	return nil
}
