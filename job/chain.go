package job

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/naming"
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
		if len(s.next)+len(next) > naming.MaxNext {
			return invalid("Then: %d next jobs, more than the %d a job may declare", len(s.next)+len(next), naming.MaxNext)
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
	if n, ok := a.AddNext(checked, naming.MaxNext); !ok {
		return invalid("%d next jobs, more than the %d a job may declare", n, naming.MaxNext)
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
	if len(next) > naming.MaxNext {
		return invalid("%d next jobs, more than the %d a job may declare", len(next), naming.MaxNext)
	}
	for i, n := range next {
		if err := validateNext(n, now); err != nil {
			return fmt.Errorf("next job %d: %w", i+1, err)
		}
	}
	return nil
}
