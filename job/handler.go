package job

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/retry"
)

// Message is one delivery of a job to a handler.
type Message struct {
	Envelope
	Attempt   int       // 1 for the first attempt
	ClaimedAt time.Time // the server's clock when a worker claimed it
}

// Lateness is how long after its ready time the job was claimed, by the
// server's clock.
func (m *Message) Lateness() time.Duration {
	if m.ClaimedAt.IsZero() || m.ReadyAt.IsZero() {
		return 0
	}
	return m.ClaimedAt.Sub(m.ReadyAt)
}

// Handler handles one delivery. A nil error acknowledges the job; any other
// error fails this attempt (see package retry for how to steer what follows).
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f(ctx, m).
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Middleware wraps a handler, e.g. to trace, log or recover.
type Middleware func(Handler) Handler

// Chain wraps h in mws so that mws[0] is the outermost.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// Entry is what a registry knows of one job type.
type Entry struct {
	Handler Handler
	Retry   retry.Policy  // nil means the worker's default
	Timeout time.Duration // 0 means the worker's default
	Retain  time.Duration // how long a succeeded job is kept when it sets no Retain of its own; 0: not kept
	// Queue is the queue the type's jobs go to ([Type.Register] sets it);
	// "" means "default". A worker with no Options.Queues serves the
	// queues of its registry's entries.
	Queue string
}

// Policy is the retry policy of an attempt of m: the job's own backoff,
// else the type's policy, else fallback (a worker's default). Every place
// that decides a failed attempt picks it here.
func (e Entry) Policy(m *Message, fallback retry.Policy) retry.Policy {
	switch {
	case m.Backoff != nil:
		return retry.Exponential{Initial: m.Backoff.Initial, Multiplier: m.Backoff.Multiplier, Max: m.Backoff.Max, Jitter: m.Backoff.Jitter}
	case e.Retry != nil:
		return e.Retry
	}
	return fallback
}

// ErrAlreadyRegistered is wrapped by [Registry.Register] when the type name
// has a handler already.
var ErrAlreadyRegistered = errors.New("job: handler already registered")

// Registry maps job type names to handlers. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]Entry
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{entries: make(map[string]Entry)} }

// Register adds the handler for a type name. It returns an error wrapping
// ErrInvalid for a bad name or a nil handler, and ErrAlreadyRegistered when
// the name is taken.
func (r *Registry) Register(typeName string, e Entry) error {
	if err := naming.Type(typeName); err != nil {
		return err
	}
	if e.Handler == nil {
		return invalid("nil handler for job type %q", typeName)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[typeName]; ok {
		return fmt.Errorf("%w: %q", ErrAlreadyRegistered, typeName)
	}
	r.entries[typeName] = e
	return nil
}

// Lookup returns the entry for a type name.
func (r *Registry) Lookup(typeName string) (Entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[typeName]
	return e, ok
}

// Types returns the registered type names, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Queues returns the queues of the registered types (an entry with no
// Queue counts as "default"), sorted, each once.
func (r *Registry) Queues() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := make(map[string]bool)
	var out []string
	for _, e := range r.entries {
		q := e.Queue
		if q == "" {
			q = naming.DefaultQueue
		}
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// DecodeError reports a payload that does not decode into its type's Go
// type. Typed handlers return it wrapped in retry.Permanent: no retry can
// fix a payload.
type DecodeError struct {
	Type   string // job type name
	GoType string // the Go type it should decode into
	Err    error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("job: payload of type %q does not decode into %s: %v", e.Type, e.GoType, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }
