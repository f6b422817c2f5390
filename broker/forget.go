package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// ErrUnknownQueue: the queue was never used in the namespace (nothing was
// enqueued to it, and no operator created it), so an operator's action on
// it is refused rather than creating it: it is likely a typo.
var ErrUnknownQueue = errors.New("broker: unknown queue")

// ErrQueueNotEmpty: Forget found jobs, dead records or remembered unique ids
// in the queue; the error names them. Nothing was changed.
var ErrQueueNotEmpty = errors.New("broker: queue not empty")

// Known reports whether queue was ever used in the namespace: it is in
// ns:queues, where the first enqueue (or DeclareQueue, Pause,
// SetConcurrency, SetRateLimit) puts it, until Forget. One SISMEMBER.
func (b *Broker) Known(ctx context.Context, queue string) (bool, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return false, err
	}
	ok, err := b.rdb.SIsMember(ctx, keyspace.QueuesKey(b.ns), queue).Result()
	if err != nil {
		return false, queueErr(queue, err)
	}
	return ok, nil
}

// MustKnow returns nil when queue was used in the namespace (Known), and
// otherwise an error wrapping ErrUnknownQueue that names it.
func (b *Broker) MustKnow(ctx context.Context, queue string) error {
	ok, err := b.Known(ctx, queue)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: queue %q was never used in namespace %s (nothing was enqueued to it)", ErrUnknownQueue, queue, b.ns)
	}
	return nil
}

// Forget removes a queue that holds nothing from the namespace: from
// ns:queues (so stats, the CLI, the dashboard and the metrics no longer
// list it) and ns:shards, with its pause, caps and rate limits. A queue
// that still holds jobs (scheduled, processing, parked or held), dead
// records or remembered unique ids is refused with an error wrapping
// ErrQueueNotEmpty that names what is left, and nothing changes; a queue
// that is not known gets ErrUnknownQueue.
//
// Each shard is checked and cleared in one WATCH/MULTI, so a job enqueued
// meanwhile either makes the call fail or arrives after it (a new use of
// the queue, which lists it again). A producer or worker that used the
// queue before keeps its shard count in memory and does not add the name
// again: forget queues nobody uses any more. The fencing counter of each
// shard stays (it never goes back), as does the per-minute history, which
// expires by itself.
func (b *Broker) Forget(ctx context.Context, queue string) error {
	if err := b.MustKnow(ctx, queue); err != nil {
		return err
	}
	q, err := b.queue(ctx, queue)
	if err != nil {
		return err
	}
	for _, s := range q.Shards() {
		if err := b.forgetShard(ctx, queue, s); err != nil {
			return err
		}
	}
	if err := b.rdb.SRem(ctx, keyspace.QueuesKey(b.ns), queue).Err(); err != nil {
		return queueErr(queue, err)
	}
	// A job enqueued between a shard's check and the removal of the name
	// (by a producer that knew the queue already) would be unlisted: look
	// again, and list the queue again if one came.
	for _, s := range q.Shards() {
		n, err := b.rdb.HLen(ctx, s.Keys().Jobs).Result()
		if err == nil && n == 0 {
			continue
		}
		if aerr := b.rdb.SAdd(ctx, keyspace.QueuesKey(b.ns), queue).Err(); aerr != nil {
			return queueErr(queue, errors.Join(err, aerr))
		}
		return fmt.Errorf("%w: queue %q received a job while it was being forgotten; it is kept", ErrQueueNotEmpty, queue)
	}
	if err := b.rdb.HDel(ctx, keyspace.ShardsKey(b.ns), queue).Err(); err != nil {
		return queueErr(queue, err)
	}
	return nil
}

// forgetShard deletes the controls and empty keys of one shard if it holds
// nothing, atomically with the check.
func (b *Broker) forgetShard(ctx context.Context, queue string, s keyspace.Shard) error {
	k := s.Keys()
	watched := []string{k.Jobs, k.Dead, k.Unique, k.Processing, k.Scheduled, k.Trimmed}
	return b.rdb.Watch(ctx, func(tx *redis.Tx) error {
		var jobs, dead, unique, proc, sched, trimmed *redis.IntCmd
		_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			jobs = p.HLen(ctx, k.Jobs)
			dead = p.HLen(ctx, k.Dead)
			unique = p.ZCard(ctx, k.Unique)
			proc = p.ZCard(ctx, k.Processing)
			sched = p.ZCard(ctx, k.Scheduled)
			trimmed = p.LLen(ctx, k.Trimmed)
			return nil
		})
		if err != nil {
			return queueErr(queue, err)
		}
		var left []string
		for _, c := range []struct {
			n    int64
			what string
		}{{sched.Val(), "scheduled"}, {proc.Val(), "processing"}, {jobs.Val(), "jobs stored (parked, held or being settled)"}, {dead.Val(), "dead records"}, {unique.Val(), "remembered unique job ids (they expire with their uniqueness window)"},
			{trimmed.Val(), "trimmed dead records waiting for a worker's OnDeadTrimmed hook"}} {
			if c.n > 0 {
				left = append(left, fmt.Sprintf("%d %s", c.n, c.what))
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%w: queue %q holds %s; nothing was changed", ErrQueueNotEmpty, queue, strings.Join(left, ", "))
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			kk := keyCapKeysOf(k)
			p.Del(ctx, append(k.JobKeys(), kk.Run, kk.Caps, kk.HeldKeys, kk.Paused)...)
			return nil
		})
		if errors.Is(err, redis.TxFailedErr) {
			return fmt.Errorf("%w: queue %q changed while it was being forgotten; nothing was changed", ErrQueueNotEmpty, queue)
		}
		if err != nil {
			return queueErr(queue, err)
		}
		return nil
	}, watched...)
}
