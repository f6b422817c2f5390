// Package attempt is the record of one handling attempt that a worker puts
// in its handler's context: the result and progress the handler reported,
// the next jobs it declared, and the callbacks (job.OnResult) that learn
// what became of the attempt. Package job reads and fills it through
// job.SetResult, job.ReportProgress, job.Next and job.OnResult; the worker
// and the test kit's Runner make one per attempt ([With]) and settle it
// ([Attempt.Settle]) once the outcome is recorded.
//
// It knows no job types: E is job.Envelope, R job.Result and P
// job.Progress, so that package job can import it.
package attempt

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Attempt is one handling attempt.
type Attempt[E, R, P any] struct {
	report func(context.Context, P) (time.Time, error)

	mu        sync.Mutex
	result    []byte
	hasResult bool
	progress  *P
	next      []*E
	fns       []func(R) // OnResult callbacks, the first registered first
	settled   bool
	res       R
}

type key struct{}

// With returns ctx carrying a new Attempt. report stores a progress report
// (nil: progress is only kept in the Attempt) and returns the time it was
// stored at. The worker calls it once per attempt before it calls the
// handler chain, and settles the Attempt once the outcome is recorded.
func With[E, R, P any](ctx context.Context, report func(context.Context, P) (time.Time, error)) (context.Context, *Attempt[E, R, P]) {
	c := &attemptContext[E, R, P]{Context: ctx, a: Attempt[E, R, P]{report: report}} // one allocation for both
	return c, &c.a
}

// attemptContext is a context carrying an Attempt: context.WithValue's,
// with the Attempt in the same allocation.
type attemptContext[E, R, P any] struct {
	context.Context
	a Attempt[E, R, P]
}

func (c *attemptContext[E, R, P]) Value(k any) any {
	if k == (key{}) {
		return &c.a
	}
	return c.Context.Value(k)
}

// String names the context as context.WithValue's do.
func (c *attemptContext[E, R, P]) String() string {
	return fmt.Sprintf("%v.WithValue(attempt.key, *attempt.Attempt)", c.Context)
}

// Of returns the Attempt of a handler's context, or nil.
func Of[E, R, P any](ctx context.Context) *Attempt[E, R, P] {
	a, _ := ctx.Value(key{}).(*Attempt[E, R, P])
	return a
}

// Result returns the result set during the attempt and whether one was.
func (a *Attempt[E, R, P]) Result() ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.result, a.hasResult
}

// SetResult keeps result (not copied) as the attempt's result.
func (a *Attempt[E, R, P]) SetResult(result []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.result, a.hasResult = result, true
}

// Next returns the next jobs declared during the attempt.
func (a *Attempt[E, R, P]) Next() []*E {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.next
}

// AddNext adds next jobs unless the attempt would then have more than
// limit; it returns how many it would have with them.
func (a *Attempt[E, R, P]) AddNext(next []*E, limit int) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.next) + len(next)
	if n > limit {
		return n, false
	}
	a.next = append(a.next, next...)
	return n, true
}

// Progress returns the last progress reported, or nil.
func (a *Attempt[E, R, P]) Progress() *P {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.progress == nil {
		return nil
	}
	p := *a.progress
	return &p
}

// Report stores p with the attempt's report function, when it has one,
// returning the time it was stored at and true; false without one.
func (a *Attempt[E, R, P]) Report(ctx context.Context, p P) (time.Time, bool, error) {
	if a.report == nil {
		return time.Time{}, false, nil
	}
	at, err := a.report(ctx, p)
	return at, true, err
}

// SetProgress keeps p as the last progress reported.
func (a *Attempt[E, R, P]) SetProgress(p P) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.progress = &p
}

// Settle runs the attempt's OnResult callbacks with its result, in reverse
// order of registration; a callback registered later runs at once. The
// worker calls it exactly once, after the handler chain returned and the
// outcome was recorded (or given up); later calls do nothing.
func (a *Attempt[E, R, P]) Settle(res R) {
	a.mu.Lock()
	if a.settled {
		a.mu.Unlock()
		return
	}
	a.settled, a.res = true, res
	fns := a.fns
	a.fns = nil
	a.mu.Unlock()
	for _, f := range slices.Backward(fns) {
		f(res)
	}
}

// OnResult registers f to be called once with the attempt's result: at
// Settle, or at once when the attempt has settled.
func (a *Attempt[E, R, P]) OnResult(f func(R)) {
	a.mu.Lock()
	if a.settled {
		res := a.res
		a.mu.Unlock()
		f(res)
		return
	}
	a.fns = append(a.fns, f)
	a.mu.Unlock()
}
