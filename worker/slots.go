package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
)

// slots tracks the jobs a worker holds: claimed and not finished, running
// or prefetched (waiting for one of Concurrency goroutines).
type slots struct {
	mu       sync.Mutex
	inflight map[protocol.Lease]*task
	runners  int           // goroutines running jobs: at most Concurrency
	line     []*task       // claimed jobs waiting for a runner, first first
	freed    chan struct{} // a slot freed (buffered 1)
	idle     chan struct{} // closed when inflight empties during shutdown
	closing  bool
}

// task is one running job.
type task struct {
	lease    protocol.Lease
	cancel   context.CancelCauseFunc
	run      func()    // runs it (or, not startable, forgets it)
	started  bool      // its handler was started (it is not waiting any more)
	began    time.Time // when it started
	released bool      // handed back at shutdown, or its lease lost before it started: its outcome is not recorded
	settled  bool      // its outcome is decided and queued for the settler
}

func newSlots() *slots {
	return &slots{inflight: make(map[protocol.Lease]*task), freed: make(chan struct{}, 1)}
}

// count returns the number of jobs held: running or waiting to.
func (s *slots) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// take records a claimed task. It reports true when the caller starts a
// runner for it (fewer than max run); otherwise t waits in line.
func (s *slots) take(t *task, max int) (runner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight[t.lease] = t
	if s.runners < max {
		s.runners++
		return true
	}
	s.line = append(s.line, t)
	return false
}

// next returns the first task in line for a runner that is done with its
// job, or nil when none waits (the runner then ends).
func (s *slots) next() *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.line) == 0 {
		s.runners--
		s.line = nil
		return nil
	}
	t := s.line[0]
	s.line[0] = nil
	s.line = s.line[1:]
	return t
}

// finish forgets a task and frees its slot.
func (s *slots) finish(t *task) {
	s.mu.Lock()
	delete(s.inflight, t.lease)
	if s.closing && len(s.inflight) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
	signal(s.freed)
}

// startable reports whether t may start: not handed back (nor its lease
// lost) and the worker not shutting down; if so it is marked started. When
// it may not, release says whether the caller hands its lease back (it was
// not handed back yet; it is marked so now).
func (s *slots) startable(t *task) (ok, release bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.released {
		return false, false
	}
	if s.closing {
		t.released = true
		return false, true
	}
	t.started = true
	t.began = time.Now()
	return true, false
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
// first) out of it: back are marked handed back now (the caller releases
// their leases), gone were already (their lease lost); the caller
// finishes both.
func (s *slots) trimLine(keep int) (back, gone []*task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.line) > max(keep, 0) {
		t := s.line[len(s.line)-1]
		s.line[len(s.line)-1] = nil
		s.line = s.line[:len(s.line)-1]
		if t.released {
			gone = append(gone, t)
			continue
		}
		t.released = true
		back = append(back, t)
	}
	return back, gone
}

// released reports whether t was handed back at shutdown.
func (s *slots) released(t *task) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.released
}

// settling marks t's outcome as decided.
func (s *slots) settling(t *task) {
	s.mu.Lock()
	t.settled = true
	s.mu.Unlock()
}

// held returns the leases of the running jobs that were not handed back.
func (s *slots) held() []protocol.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.Lease, 0, len(s.inflight))
	for l, t := range s.inflight {
		if !t.released {
			out = append(out, l)
		}
	}
	return out
}

// lost handles a lease the heartbeat found lost: the handler of a job that
// still runs is cancelled with cause, and lost reports true; a job that
// finished (or whose outcome is being recorded) meanwhile is no loss. A
// prefetched job that has not started never will: someone else may hold
// it now.
func (s *slots) lost(l protocol.Lease, cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.inflight[l]
	if !ok || t.settled || t.released {
		return false
	}
	if !t.started && errors.Is(cause, broker.ErrLeaseLost) {
		t.released = true
	}
	t.cancel(cause)
	return true
}

// cancelled handles a cancel notice: the handler of the running job id of
// queue under token is cancelled with cause (broker.ErrCanceled). It
// reports whether such a job was running.
func (s *slots) cancelled(queue, id string, token int64, cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l, t := range s.inflight {
		if l.ID == id && l.Token == token && l.Queue() == queue && !t.settled && !t.released {
			t.cancel(cause)
			return true
		}
	}
	return false
}

// close starts the shutdown: it marks the jobs that wait for a goroutine
// (prefetched, not started) as handed back and returns their leases, how
// many jobs are held, and a channel closed once none is.
func (s *slots) close() (waiting []protocol.Lease, held int, idle <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for l, t := range s.inflight {
		if !t.started && !t.released {
			t.released = true
			waiting = append(waiting, l)
		}
	}
	ch := make(chan struct{})
	if len(s.inflight) == 0 {
		close(ch)
	} else {
		s.idle = ch
	}
	return waiting, len(s.inflight), ch
}

// releaseAll marks every held job as handed back and returns the leases
// of those that were not already.
func (s *slots) releaseAll() []protocol.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.Lease, 0, len(s.inflight))
	for l, t := range s.inflight {
		if !t.released {
			t.released = true
			out = append(out, l)
		}
	}
	return out
}
