// Package registry is the table behind job.Registry: job type names mapped
// to their handlers, with each type's retry policy, timeout, retention and
// queue. Package job fills it (job.Type.Handle, Register); the worker and
// delayqtest.Runner read it through job.Registry.Table, whose argument
// ([Key]) no other module can name.
//
// It knows no job types: H is job.Handler and P retry.Policy, so that
// package job can import it.
package registry

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Key is the argument of job.Registry.Table.
type Key struct{}

// Entry is what a registry knows of one job type.
type Entry[H, P any] struct {
	Handler H
	Retry   P             // the zero value (a nil policy) means the worker's default
	Timeout time.Duration // 0 means the worker's default
	Retain  time.Duration // how long a succeeded job is kept when it sets no Retain of its own; 0: not kept
	// Queue is the queue the type's jobs go to; "" means the default queue.
	// A worker with no Options.Queues serves the queues of its registry's
	// entries.
	Queue string
}

// Table maps job type names to entries. It is safe for concurrent use; the
// zero value is empty.
type Table[H, P any] struct {
	mu      sync.RWMutex
	entries map[string]Entry[H, P]
}

// Register adds the entry of a type name, or returns an error when the
// name has one already. The caller checks the name and the handler.
func (t *Table[H, P]) Register(typeName string, e Entry[H, P]) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.entries[typeName]; ok {
		return fmt.Errorf("job type %q has a handler already", typeName)
	}
	if t.entries == nil {
		t.entries = make(map[string]Entry[H, P])
	}
	t.entries[typeName] = e
	return nil
}

// Lookup returns the entry of a type name.
func (t *Table[H, P]) Lookup(typeName string) (Entry[H, P], bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.entries[typeName]
	return e, ok
}

// Types returns the registered type names, sorted.
func (t *Table[H, P]) Types() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Queues returns the queues of the registered types (an entry with no
// Queue counts as defaultQueue), sorted, each once.
func (t *Table[H, P]) Queues(defaultQueue string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	seen := make(map[string]bool)
	var out []string
	for _, e := range t.entries {
		q := e.Queue
		if q == "" {
			q = defaultQueue
		}
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}
