package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// The typed helpers of package job (Type.Cancel, Reschedule, Lookup) take a
// *Broker.
var _ job.Controller = (*Broker)(nil)

// Cancel cancels a job, whether it waits or runs. A job that waits
// (scheduled, due, or held by a pause, cap, rate limit or its key's turn)
// is removed and never runs: Running is false. A job a worker runs is asked
// to stop: Running is true, the worker that holds it is told on the
// queue's cancel channel, and its heartbeat finds the request too (within
// a third of its lease) if the notice was missed; its handler's context is
// cancelled with cause ErrCancelled, and the job ends in the dead letters
// with Reason ReasonCancelled once the handler returns an error (a handler
// that returns nil has done its work, and the job is acknowledged); a job
// whose worker died meanwhile is ended as cancelled by the reaper instead
// of retried. It returns an error wrapping ErrNotFound when the queue has
// no such job, and job.ErrInvalid for a bad queue name or id (nothing
// changed). A call whose reply was lost fails with a *CallError
// (ErrOutcomeUnknown): Resend answers it as the first send was (nil for a
// job it cancelled, not ErrNotFound; the resend's answer does not say
// whether the job was running).
func (b *Broker) Cancel(ctx context.Context, queue, id string) (job.Cancelled, error) {
	s, err := b.shardOf(ctx, queue, id)
	if err != nil {
		return job.Cancelled{}, err
	}
	code, err := b.cancelCall(ctx, s, queue, id, callID())
	return job.Cancelled{Running: code == 2}, err
}

// cancelCall is one send of a cancel call with id cid.
func (b *Broker) cancelCall(ctx context.Context, s keyspace.Shard, queue, id string, cid string) (int64, error) {
	k := s.Keys()
	kk := keyCapKeysOf(k)
	res, err := b.run(ctx, cancelScript, []string{k.Scheduled, k.Processing, k.Jobs, k.Attempts, k.Parked, k.Leases, k.Cancels, k.Held, k.Calls, k.Batched, k.Unique, kk.HeldKeys, kk.ParkedTypes},
		id, k.Cancel, cid, b.windowArg())
	if unsure(err) {
		ce := unsureErr("cancel", queue, id, cid, err)
		ce.resend = func(ctx context.Context) error {
			_, err := b.cancelCall(ctx, s, queue, id, cid)
			return err
		}
		return 0, ce
	}
	if err != nil {
		return 0, queueErr(queue, err)
	}
	code, _ := res.(int64)
	if code == 1 {
		// The job ended (cancel.lua recorded its ending): a batch member's
		// ending is counted now. Should this fail, the reaper's sweep of
		// any worker of the queue counts it.
		_ = b.countEndings(ctx, s, id)
	}
	return code, stateResult(queue, id, res)
}

// Reschedule moves a scheduled job to ready at at (the zero time means now).
// It returns an error wrapping ErrNotFound when the queue has no such
// pending job and ErrInProgress when a worker holds it (nothing changed);
// lost replies as for Cancel (a resend's nil does not return the ready
// time: Job reads it).
func (b *Broker) Reschedule(ctx context.Context, queue, id string, at time.Time) (time.Time, error) {
	var atMS int64
	if !at.IsZero() {
		atMS = readyMS(at)
	}
	return b.reschedule(ctx, queue, id, atMS, 0)
}

// RescheduleAfter moves a scheduled job to ready delay after the server's
// now (0 means now). Errors as for Reschedule; a negative delay gives an error
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
	return b.rescheduleCall(ctx, s, queue, id, atMS, delayUS, callID())
}

// rescheduleCall is one send of a reschedule call with id cid.
func (b *Broker) rescheduleCall(ctx context.Context, s keyspace.Shard, queue, id string, atMS, delayUS int64, cid string) (time.Time, error) {
	k := s.Keys()
	res, err := b.run(ctx, rescheduleScript, []string{k.Scheduled, k.Processing, k.Parked, k.Held, k.Jobs, k.Calls, keyCapKeysOf(k).HeldKeys}, id, atMS, delayUS, k.Wake, cid, b.windowArg())
	if unsure(err) {
		ce := unsureErr("reschedule", queue, id, cid, err)
		ce.resend = func(ctx context.Context) error {
			_, err := b.rescheduleCall(ctx, s, queue, id, atMS, delayUS, cid)
			return err
		}
		return time.Time{}, ce
	}
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

// stateResult is the error of a cancel or reschedule that answered res:
// > 0 done, -1 a worker holds the job, otherwise not found (rules.Change).
func stateResult(queue, id string, res any) error {
	found := rules.Absent
	switch code, _ := res.(int64); {
	case code > 0:
		found = rules.Scheduled
	case code == -1:
		found = rules.Held
	}
	return rules.Change(found, queue, id)
}
