package job

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Chains: a job declares the jobs that follow it, enqueued once it
// succeeded. A producer declares them when it enqueues the job ([Then]); a
// handler declares them while it runs ([Next]), e.g. with arguments it
// computed. A failed attempt, a retry and a dead ending enqueue none; a
// retried job that then succeeds enqueues them once. The worker enqueues a
// next job that lives in the same Redis slot as the job (same queue and
// shard) in the script call that acknowledges the job, atomically; one in
// another slot just before the acknowledgement, as an idempotent first step
// (see docs/batches.md, "Chains").

// maxNext is the most next jobs a job may declare with [Then], and the
// most an attempt may add with [Next].
const maxNext = 100

// Then makes next be enqueued when the job succeeds, in the order given.
// Each next job is an envelope of any type and queue ([Type.Envelope]); its
// delay ([In]) counts from the success, its ready time ([At]) is absolute,
// and it may carry next jobs of its own, so a chain can be as long as
// needed. A next job without an [ID] gets an id derived from the job's id, creation
// time and its place ("<id>><n>@<created ms, base 36>", see docs/batches.md). Next jobs
// may not be [Unique], [Replace], [Debounce] or members of a batch of their own (the
// next jobs of a batch member join its batch): the chain itself makes
// them enqueued once. The envelopes are copied. Per job only.
func Then(next ...*Envelope) Option {
	return jobOption(func(s *settings) error {
		if len(s.next)+len(next) > maxNext {
			return invalid("Then: %d next jobs, more than the %d a job may declare", len(s.next)+len(next), maxNext)
		}
		for i, n := range next {
			c, err := checkNext(n)
			if err != nil {
				return fmt.Errorf("Then: next job %d: %w", i+1, err)
			}
			s.next = append(s.next, c)
		}
		return nil
	})
}

// Next declares next jobs from a running handler: they are enqueued when
// this attempt succeeds, after those of [Then], as Then describes. A failed
// attempt forgets them; the next attempt declares its own. It returns an
// error wrapping ErrInvalid for a bad envelope or too many next jobs, and
// ErrNoAttempt outside a handler.
func Next(ctx context.Context, next ...*Envelope) error {
	a := attemptOf(ctx)
	if a == nil {
		return ErrNoAttempt
	}
	checked := make([]*Envelope, 0, len(next))
	for i, n := range next {
		c, err := checkNext(n)
		if err != nil {
			return fmt.Errorf("job: next job %d: %w", i+1, err)
		}
		checked = append(checked, c)
	}
	if n, ok := a.AddNext(checked, maxNext); !ok {
		return invalid("%d next jobs, more than the %d a job may declare", n, maxNext)
	}
	return nil
}

// checkNext validates a next job as an enqueue would, and returns a copy.
func checkNext(env *Envelope) (*Envelope, error) {
	if err := validateNext(env, time.Now()); err != nil {
		return nil, err
	}
	c := *env
	c.ReadyAt = time.Time{}
	if len(env.Headers) > 0 {
		c.Headers = make(map[string]string, len(env.Headers))
		for k, v := range env.Headers {
			c.Headers[k] = v
		}
	}
	c.Next = append([]*Envelope(nil), env.Next...)
	return &c, nil
}

// validateNext checks one next job as [Prepare] checks a job, its own next
// jobs included, and refuses what a chain does not take.
func validateNext(env *Envelope, now time.Time) error {
	if env == nil {
		return invalid("nil envelope")
	}
	switch {
	case env.Unique:
		return invalid("job of type %q is Unique; a next job is enqueued once by its chain and may not be", env.Type)
	case env.Replace:
		return invalid("job of type %q has Replace; a next job may not", env.Type)
	case env.Debounce != 0:
		return invalid("job of type %q has Debounce; a next job is enqueued once by its chain and may not be", env.Type)
	case env.Batch != "":
		return invalid("job of type %q is a member of batch %q; a next job may not be", env.Type, env.Batch)
	}
	probe := *env
	return Prepare(&probe, now)
}

// validateChain checks the next jobs of a job ([Prepare] calls it).
func validateChain(next []*Envelope, now time.Time) error {
	if len(next) > maxNext {
		return invalid("%d next jobs, more than the %d a job may declare", len(next), maxNext)
	}
	for i, n := range next {
		if err := validateNext(n, now); err != nil {
			return fmt.Errorf("next job %d: %w", i+1, err)
		}
	}
	return nil
}

// wireNext is a next job as its parent's body stores it.
type wireNext struct {
	Queue   string          `json:"q,omitempty"`
	ID      string          `json:"i,omitempty"`
	DelayUS int64           `json:"d,omitempty"`
	AtMS    int64           `json:"a,omitempty"`
	Body    json.RawMessage `json:"b"`
}

// marshalNext encodes next jobs for their parent's body.
func marshalNext(next []*Envelope) ([]wireNext, error) {
	if len(next) == 0 {
		return nil, nil
	}
	out := make([]wireNext, len(next))
	for i, n := range next {
		body, err := n.MarshalBinary()
		if err != nil {
			return nil, err
		}
		out[i] = wireNext{Queue: n.Queue, ID: n.ID, DelayUS: n.Delay.Microseconds(), Body: body}
		if !n.At.IsZero() {
			out[i].AtMS = max(n.At.UnixMilli(), 1)
		}
	}
	return out, nil
}

// decodeNext decodes the next jobs of a stored body.
func decodeNext(ws []wireNext) ([]*Envelope, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	if len(ws) > maxNext {
		return nil, fmt.Errorf("job: %w: %d next jobs, more than %d", ErrCorrupt, len(ws), maxNext)
	}
	out := make([]*Envelope, len(ws))
	for i, w := range ws {
		e, err := Decode(w.Body)
		if err != nil {
			return nil, fmt.Errorf("job: next job %d: %w", i+1, err)
		}
		if w.DelayUS < 0 || w.AtMS < 0 {
			return nil, fmt.Errorf("job: %w: next job %d: negative delay or ready time", ErrCorrupt, i+1)
		}
		e.Queue, e.ID = w.Queue, w.ID
		e.Delay = time.Duration(w.DelayUS) * time.Microsecond
		if w.AtMS > 0 {
			e.At = time.UnixMilli(w.AtMS)
		}
		out[i] = e
	}
	return out, nil
}
