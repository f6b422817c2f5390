// Package clock provides a simulated clock for tests.
package clock

import (
	"sync"
	"time"
)

// Simulated is a clock that moves only when told to. It is safe for
// concurrent use.
type Simulated struct {
	mu  sync.Mutex
	now time.Time
}

// NewSimulated returns a clock set to start.
func NewSimulated(start time.Time) *Simulated { return &Simulated{now: start} }

// Now returns the clock's time.
func (c *Simulated) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Simulated) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
