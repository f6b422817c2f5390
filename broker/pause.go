package broker

import (
	"context"
	"fmt"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// Pause pauses queue: from the moment it returns no worker claims a job of
// the queue (checked inside the claim script, so a paused job is never
// leased) until Resume. Jobs go on being enqueued, retried and cancelled;
// running jobs run to their end. Workers that find the queue paused sleep
// until the resume's wake-up notice (at most their MaxIdle). Stats report
// it (QueueStats.Paused). Pausing a paused queue changes nothing. One
// script call per shard.
func (b *Broker) Pause(ctx context.Context, queue string) error {
	_, err := b.pause(ctx, queue, "*", true)
	return err
}

// Resume ends a pause of queue and wakes its workers. Resuming a queue that
// is not paused changes nothing.
func (b *Broker) Resume(ctx context.Context, queue string) error {
	_, err := b.pause(ctx, queue, "*", false)
	return err
}

// PauseType pauses the jobs of one type in queue: a claim that finds one
// due sets it aside (parked: still pending, cancellable, counted in
// QueueStats.Parked) instead of leasing it, and claims the other types'
// jobs as usual. The type name is checked (job.ValidateType).
func (b *Broker) PauseType(ctx context.Context, queue, typ string) error {
	if err := job.ValidateType(typ); err != nil {
		return err
	}
	_, err := b.pause(ctx, queue, typ, true)
	return err
}

// ResumeType ends a pause of typ in queue: its parked jobs go back to the
// schedule at their ready times (due at once), and the queue's workers
// are woken. It returns how many jobs came back. Its cost is O(P) for the
// P parked jobs of the queue.
func (b *Broker) ResumeType(ctx context.Context, queue, typ string) (int64, error) {
	if err := job.ValidateType(typ); err != nil {
		return 0, err
	}
	return b.pause(ctx, queue, typ, false)
}

// pause runs pause.lua on every shard of queue; what is "*" or a type.
func (b *Broker) pause(ctx context.Context, queue, what string, on bool) (int64, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return 0, err
	}
	// A queue paused before its first job gets its shard count now, so
	// that the pause covers the shards its jobs will use.
	if _, err := b.route.Place(ctx, queue); err != nil {
		return 0, queueErr(queue, err)
	}
	return b.sumShards(ctx, queue, func(_ keyspace.Queue, s keyspace.Shard) (int64, error) {
		k := s.Keys()
		res, err := b.run(ctx, pauseScript, []string{k.Paused, k.Parked, k.Scheduled, k.Jobs}, what, flag(on), k.Wake)
		if err != nil {
			return 0, err
		}
		n, ok := res.(int64)
		if !ok {
			return 0, fmt.Errorf("broker: pause: unexpected reply %v", res)
		}
		return n, nil
	})
}
