package job

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/registry"
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

// Registry maps job type names to their handlers ([Type.Handle]), with
// each type's retry policy, timeout, retention and queue; a worker runs the
// handlers of its registry. It is safe for concurrent use.
type Registry struct {
	t registry.Table[Handler, retry.Policy]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Table returns the registry's table, from which the worker and the test
// kit read the handlers; its argument is of an internal package, so only
// delayq's own packages call it.
func (r *Registry) Table(registry.Key) *registry.Table[Handler, retry.Policy] { return &r.t }

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
