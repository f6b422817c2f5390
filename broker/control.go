package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/job"
)

// The typed helpers of package job (Type.Cancel, Reschedule, Lookup) take a
// *Broker.
var _ job.Controller = (*Broker)(nil)

// Cancel removes a job that is still scheduled, so it never runs. It returns
// an error wrapping ErrInProgress when a worker holds the job (nothing
// changed) and ErrNotFound when the queue has no such pending job.
func (b *Broker) Cancel(ctx context.Context, queue, id string) error {
	s, err := b.shardOf(ctx, queue, id)
	if err != nil {
		return err
	}
	k := s.Keys()
	res, err := b.run(ctx, cancelScript, []string{k.Scheduled, k.Processing, k.Jobs, k.Attempts, k.Parked}, id)
	if err != nil {
		return queueErr(queue, err)
	}
	return stateResult(queue, id, res)
}

// Reschedule moves a scheduled job to ready at at (the zero time means now).
// Errors as for Cancel.
func (b *Broker) Reschedule(ctx context.Context, queue, id string, at time.Time) (time.Time, error) {
	var atMS int64
	if !at.IsZero() {
		atMS = readyMS(at)
	}
	return b.reschedule(ctx, queue, id, atMS, 0)
}

// RescheduleAfter moves a scheduled job to ready delay after the server's
// now (0 means now). Errors as for Cancel; a negative delay gives an error
// wrapping job.ErrInvalid, and nothing changes.
func (b *Broker) RescheduleAfter(ctx context.Context, queue, id string, delay time.Duration) (time.Time, error) {
	if delay < 0 {
		return time.Time{}, fmt.Errorf("broker: %w: delay %s is negative", job.ErrInvalid, delay)
	}
	return b.reschedule(ctx, queue, id, 0, durUS(delay))
}

// reschedule moves a scheduled job to atMS, or to the server's now + delayUS
// (rounded up to a whole ms) when atMS is 0.
func (b *Broker) reschedule(ctx context.Context, queue, id string, atMS, delayUS int64) (time.Time, error) {
	s, err := b.shardOf(ctx, queue, id)
	if err != nil {
		return time.Time{}, err
	}
	k := s.Keys()
	res, err := b.run(ctx, rescheduleScript, []string{k.Scheduled, k.Processing, k.Parked}, id, atMS, delayUS, k.Wake)
	if err != nil {
		return time.Time{}, queueErr(queue, err)
	}
	v, err := int64s(res, 2)
	if err != nil {
		return time.Time{}, err
	}
	if err := stateResult(queue, id, v[1]); err != nil {
		return time.Time{}, err
	}
	return fromMS(v[1]), nil
}

func stateResult(queue, id string, res any) error {
	switch code, _ := res.(int64); {
	case code > 0:
		return nil
	case code == -1:
		return fmt.Errorf("%w: job %q in queue %q", ErrInProgress, id, queue)
	default:
		return fmt.Errorf("%w: job %q in queue %q", ErrNotFound, id, queue)
	}
}
