package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/attempt"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// slots tracks the jobs a worker holds: claimed and not finished, running,
// prefetched (waiting for one of Concurrency runners) or settling (its
// outcome queued for the settler: it holds no runner any more, but its
// lease is extended until the outcome is recorded, so that a slow record
// does not hand the job to another worker).
//
// Jobs run on runners: long-lived goroutines, at most Concurrency, started
// as jobs come (one when a job arrives and none is parked) and parked
// between jobs; the shutdown stops them. A job handed to a parked runner
// goes to it directly, never through the line: the line holds only the
// jobs that wait because every runner is busy (the prefetched ones).
//
// The line takes its jobs in turns between their flow-control keys
// (job.Key; the jobs without a key as one key), as the claim deals its
// room out under fair turns: a job joins the line at the end of its key's
// next turn (see enter), so a key whose job was just claimed waits behind
// at most one job of each other key, not behind the whole prefetch of a
// key with a backlog. Within a key, and when no job has a key, the line
// is first in, first out.
type slots struct {
	lease, margin time.Duration // a job whose lease was confirmed more than lease - margin ago is stale
	mu            sync.Mutex
	inflight      map[leaseKey]*task
	settling      int                // tasks of inflight that are settling
	runners       int                // runners started and not stopped: at most Concurrency
	parked        []*runner          // runners waiting for a job, the last parked last
	line          []*task            // claimed jobs waiting for a runner, by turn, then first first
	turns         map[string]keyTurn // the keys of the jobs in line
	round         int64              // the turn of the job a runner took from the line last
	freed         chan struct{}      // a slot freed (buffered 1)
	idle          chan struct{}      // closed when inflight empties during shutdown
	closing       bool
	// starved: a prefetched job went stale waiting in line for a runner
	// (every runner held its job for about a lease). Nothing more is
	// prefetched until a runner is done with its job: jobs claimed ahead
	// would only wait out their lease and be handed back again, over and
	// over, while a worker with free runners could run them.
	starved bool
}

// leaseKey identifies a held lease in slots.inflight: its shard's name, the
// job's id and the claim's fencing token (a protocol.Lease carries the
// whole shard, its keys included).
type leaseKey struct {
	shard, id string
	token     int64
}

func keyOf(l *protocol.Lease) leaseKey { return leaseKey{l.Shard.Name(), l.ID, l.Token} }

// runner is one parked runner's mailbox: the job it runs next, or nil when
// it is to stop.
type runner struct{ wake chan *task }

// task is one held job.
type task struct {
	c         *protocol.Claimed // the job as claimed: its lease is c.Lease
	ctx       context.Context   // its handler's
	cancel    context.CancelCauseFunc
	claimedAt time.Time // the server's clock at the claim
	// confirmed: when the claim that took it, or the last extend that
	// confirmed its lease, was sent. The server set its deadline a lease
	// after that or later, so the lease is live for a lease from then. A
	// job is started, and a handler left running, only while less than
	// lease - margin has passed since (see since).
	confirmed time.Time
	started   bool      // its handler was started (it is not waiting any more)
	began     time.Time // when it started
	released  bool      // handed back (at shutdown, its lease stale before it started, or lost): its outcome is not recorded
	settled   bool      // its outcome (or its release) is queued for the settler
	stale     bool      // its handler was cancelled with ErrLeaseStale
	// msg is the delivery its handler sees (made when it starts); attempt
	// (nil for a job that ran no handler) is settled with result, the
	// outcome queued for the settler, once the settler has recorded it:
	// that runs the attempt's OnResult callbacks (see Worker.ended).
	msg     job.Message
	attempt *attempt.Attempt[job.Envelope, job.Result, job.Progress]
	result  job.Result
	turn    int64 // its turn in line (see slots.turn)
}

// keyTurn is what the line holds of one key: its jobs in line and the
// turn of the last of them.
type keyTurn struct {
	n    int
	last int64
}

// key returns t's flow-control key: "" for none (or a job that did not
// decode, which never waits in line for long).
func (t *task) key() string {
	if t.c.Envelope == nil {
		return ""
	}
	return t.c.Envelope.Key
}

// A task is its handler's parent context: ctx's, carrying the task
// itself (taskKey), with no allocation of its own.
type taskKey struct{}

func (t *task) Deadline() (time.Time, bool) { return t.ctx.Deadline() }
func (t *task) Done() <-chan struct{}       { return t.ctx.Done() }
func (t *task) Err() error                  { return t.ctx.Err() }
func (t *task) Value(key any) any {
	if key == (taskKey{}) {
		return t
	}
	return t.ctx.Value(key)
}

// String names the context as the context package's own do.
func (t *task) String() string { return fmt.Sprintf("%v.WithValue(worker.taskKey)", t.ctx) }

// lease returns t's lease.
func (t *task) lease() *protocol.Lease { return &t.c.Lease }

// newSlots returns the slots of a worker whose leases last lease; margin
// is how much of it a job must have left to start (or its handler to run
// on).
func newSlots(lease, margin time.Duration) *slots {
	return &slots{lease: lease, margin: margin, inflight: make(map[leaseKey]*task), freed: make(chan struct{}, 1)}
}

// since is how long ago confirmed was, now: by the monotonic clock, or by
// the wall clock when more has passed by it. The monotonic clock counts a
// stopped process's time (SIGSTOP, a frozen VM) but, on Linux, not a
// suspended machine's; the wall clock counts both (a step of the wall
// clock forward can only make a lease look older than it is, which hands
// back a job early, never late).
func since(now, confirmed time.Time) time.Duration {
	return max(now.Sub(confirmed), now.Round(0).Sub(confirmed.Round(0)))
}

// isStale reports whether t's lease may run out within the margin.
func (s *slots) isStale(t *task, now time.Time) bool {
	return since(now, t.confirmed) >= s.lease-s.margin
}

// count returns the number of jobs that hold or wait for a goroutine:
// running or prefetched, not settling.
func (s *slots) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight) - s.settling
}

// take records a claimed task and hands it to a parked runner, if one is;
// else it reports true when the caller starts a runner for it (fewer than
// max run); else t waits in line.
func (s *slots) take(t *task, max int) (start bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight[keyOf(t.lease())] = t
	if n := len(s.parked); n > 0 {
		r := s.parked[n-1]
		s.parked[n-1] = nil
		s.parked = s.parked[:n-1]
		r.wake <- t // buffered 1, and empty while it is parked
		return false
	}
	if s.runners < max {
		s.runners++
		return true
	}
	s.enter(t)
	return false
}

// enter puts t in line at its turn: the turn after its key's last job in
// line, or, when none of its key waits, the turn of the job a runner took
// from the line last. Jobs of one turn keep their order of arrival. s.mu is held.
func (s *slots) enter(t *task) {
	k := t.key()
	kt, ok := s.turns[k]
	t.turn = s.round
	if ok {
		t.turn = max(t.turn, kt.last+1)
	}
	if s.turns == nil {
		s.turns = make(map[string]keyTurn)
	}
	s.turns[k] = keyTurn{n: kt.n + 1, last: t.turn}
	i := len(s.line)
	for i > 0 && s.line[i-1].turn > t.turn {
		i--
	}
	s.line = slices.Insert(s.line, i, t)
}

// left records that t left the line (taken by a runner or handed back).
// s.mu is held.
func (s *slots) left(t *task) {
	k := t.key()
	kt := s.turns[k]
	if kt.n <= 1 {
		delete(s.turns, k)
		return
	}
	kt.n--
	s.turns[k] = kt
}

// unline takes out of line the jobs drop reports true for. s.mu is held.
func (s *slots) unline(drop func(*task) bool) {
	s.line = slices.DeleteFunc(s.line, func(t *task) bool {
		if drop(t) {
			s.left(t)
			return true
		}
		return false
	})
}

// serve is a runner: it runs t, then the first task in line or, when none
// waits, the next task handed to it while it is parked, until the shutdown
// stops it.
func (s *slots) serve(t *task, run func(*task)) {
	r := &runner{wake: make(chan *task, 1)}
	for t != nil {
		run(t)
		var park bool
		if t, park = s.next(r); park {
			t = <-r.wake
		}
	}
}

// next returns the first task in line for runner r, done with its job;
// when none waits it parks r (park is true: the caller waits for its next
// task on r.wake), or, once the worker is shutting down, stops it (nil).
func (s *slots) next(r *runner) (t *task, park bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starved = false
	if len(s.line) > 0 {
		t = s.line[0]
		s.line[0] = nil
		s.line = s.line[1:]
		s.round = t.turn
		s.left(t)
		return t, false
	}
	s.line = nil
	if s.closing {
		s.runners--
		return nil, false
	}
	s.parked = append(s.parked, r)
	return nil, true
}

// finish forgets a task (once its outcome is recorded, or when nothing is
// to be recorded) and frees its slot. Finishing a task twice is harmless.
func (s *slots) finish(t *task) {
	s.mu.Lock()
	if k := keyOf(t.lease()); s.inflight[k] == t {
		delete(s.inflight, k)
		if t.settled {
			s.settling--
		}
	}
	if s.closing && len(s.inflight) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
	signal(s.freed)
}

// startable reports whether t may start now: not handed back, the worker
// not shutting down, and its lease not stale; if so it is marked started.
// When it may not, back says whether the caller hands its lease back (it
// is marked so now, and settling); otherwise it was handed back already,
// and the caller forgets it.
func (s *slots) startable(t *task, now time.Time) (ok, back bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case t.released:
		return false, false
	case s.closing:
		s.handBack(t)
		return false, true
	case s.isStale(t, now):
		s.handBack(t)
		s.starved = true
		return false, true
	}
	t.started = true
	t.began = now
	return true, false
}

// handBack marks t handed back and settling (its release queued by the
// caller). s.mu is held.
func (s *slots) handBack(t *task) {
	t.released = true
	if !t.settled {
		t.settled = true
		s.settling++
	}
}

// oldestRunning returns how long the longest-running handler has run (0
// when none runs).
func (s *slots) oldestRunning() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest time.Duration
	for _, t := range s.inflight {
		if t.started && !t.settled {
			oldest = max(oldest, time.Since(t.began))
		}
	}
	return oldest
}

// trimLine takes the jobs waiting in line beyond keep (the last claimed
// first) out of it and marks them handed back; the caller releases them.
func (s *slots) trimLine(keep int) (back []*task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.line) > max(keep, 0) {
		t := s.line[len(s.line)-1]
		s.line[len(s.line)-1] = nil
		s.line = s.line[:len(s.line)-1]
		s.left(t)
		s.handBack(t)
		back = append(back, t)
	}
	return back
}

// stale hands back the jobs waiting in line whose lease may have ended
// (the process was stalled, say, while they waited), for the caller to
// release, and cancels the handlers of running jobs whose lease may have
// ended, with cause ErrLeaseStale: another worker may hold the job by now.
// It returns the jobs handed back and how many handlers it cancelled.
func (s *slots) stale(now time.Time) (back []*task, cancelled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.inflight {
		if t.released || t.settled || t.stale || !s.isStale(t, now) {
			continue
		}
		if t.started {
			t.stale = true
			t.cancel(ErrLeaseStale)
			cancelled++
			continue
		}
		s.handBack(t)
		back = append(back, t)
	}
	if len(back) > 0 {
		s.unline(func(t *task) bool { return t.released })
		s.starved = true
	}
	return back, cancelled
}

// released reports whether t was handed back at shutdown.
func (s *slots) released(t *task) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.released
}

// settle marks t's outcome as decided and queued, and frees its goroutine's
// slot for the fetcher. It reports false when t was handed back meanwhile
// (the shutdown deadline): its outcome is then not recorded.
func (s *slots) settle(t *task) bool {
	s.mu.Lock()
	if t.released {
		s.mu.Unlock()
		return false
	}
	if !t.settled {
		t.settled = true
		s.settling++
	}
	s.starved = false // its runner is done with it
	s.mu.Unlock()
	signal(s.freed)
	return true
}

// prefetching reports whether jobs may be claimed ahead of the runners:
// not since a prefetched job went stale in line, until a runner is done
// with its job (see starved).
func (s *slots) prefetching() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.starved
}

// held returns the leases of the jobs held and not handed back, settling
// ones included: the heartbeat extends them all.
func (s *slots) held() []protocol.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.Lease, 0, len(s.inflight))
	for _, t := range s.inflight {
		if !t.released {
			out = append(out, *t.lease())
		}
	}
	return out
}

// extended records that an extend sent at sent confirmed lease l: it is
// live for a lease from then.
func (s *slots) extended(l *protocol.Lease, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.inflight[keyOf(l)]; ok && sent.After(t.confirmed) {
		t.confirmed = sent
	}
}

// lost handles a lease the heartbeat found lost: the handler of a job that
// still runs is cancelled with cause, and lost reports true; a job that
// finished (or whose outcome is being recorded) meanwhile is no loss. A
// prefetched job that has not started never will: someone else may hold
// it now; it is taken out of line and forgotten.
func (s *slots) lost(l *protocol.Lease, cause error) bool {
	s.mu.Lock()
	t, ok := s.inflight[keyOf(l)]
	if !ok || t.settled || t.released {
		s.mu.Unlock()
		return false
	}
	t.cancel(cause)
	if t.started || !errors.Is(cause, broker.ErrLeaseLost) {
		s.mu.Unlock()
		return true
	}
	t.released = true
	s.unline(func(x *task) bool { return x == t })
	s.mu.Unlock()
	s.finish(t)
	return true
}

// cancelled handles a cancel notice: the handler of the running job id of
// queue under token is cancelled with cause (broker.ErrCancelled). It
// reports whether such a job was running.
func (s *slots) cancelled(queue, id string, token int64, cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.inflight {
		if k.id == id && k.token == token && t.lease().Queue() == queue && !t.settled && !t.released {
			t.cancel(cause)
			return true
		}
	}
	return false
}

// close starts the shutdown: it takes the jobs that wait for a runner
// (prefetched, not started) out of line and marks them handed back, and
// returns them (the caller releases them), how many jobs are held, and a
// channel closed once none is. Parked runners stop now; busy ones once
// their job is done.
func (s *slots) close() (waiting []*task, held int, idle <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for _, t := range s.line {
		if !t.released {
			s.handBack(t)
			waiting = append(waiting, t)
		}
	}
	clear(s.line)
	s.line = s.line[:0]
	clear(s.turns)
	for _, r := range s.parked {
		r.wake <- nil
	}
	s.runners -= len(s.parked)
	clear(s.parked)
	s.parked = s.parked[:0]
	ch := make(chan struct{})
	if len(s.inflight) == 0 {
		close(ch)
	} else {
		s.idle = ch
	}
	return waiting, len(s.inflight), ch
}

// releaseAll marks every held job whose outcome is not queued yet as
// handed back and returns them, for the caller to release.
func (s *slots) releaseAll() []*task {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*task, 0, len(s.inflight))
	for _, t := range s.inflight {
		if !t.released && !t.settled {
			s.handBack(t)
			out = append(out, t)
		}
	}
	return out
}
