package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// Known reports whether queue was ever used in the namespace: it is in
// ns:queues, where the first enqueue (or DeclareQueue, Pause,
// SetConcurrency, SetRateLimit) puts it, until Forget. One SISMEMBER.
func (b *Broker) known(ctx context.Context, queue string) (bool, error) {
	if err := naming.Queue(queue); err != nil {
		return false, err
	}
	ok, err := b.rdb.SIsMember(ctx, keyspace.QueuesKey(b.ns), queue).Result()
	if err != nil {
		return false, queueErr(queue, err)
	}
	return ok, nil
}

// MustKnow returns nil when queue was used in the namespace (Known), and
// otherwise an error wrapping admin.ErrUnknownQueue that names it.
func (b *Broker) mustKnow(ctx context.Context, queue string) error {
	ok, err := b.known(ctx, queue)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: queue %q was never used in namespace %s (nothing was enqueued to it)", admin.ErrUnknownQueue, queue, b.ns)
	}
	return nil
}

// Forget removes a queue that holds nothing from the namespace: from
// ns:queues (so stats, the CLI, the dashboard and the metrics no longer
// list it) and ns:shards, with its pause, caps and rate limits. A queue
// that still holds jobs (scheduled, processing, parked or held), dead
// records or remembered unique ids is refused with an error wrapping
// admin.ErrQueueNotEmpty that names what is left, and nothing changes; a queue
// that is not known gets admin.ErrUnknownQueue.
//
// Each shard is checked and cleared in one WATCH/MULTI, so a job enqueued
// meanwhile either makes the call fail or arrives after it (a new use of
// the queue, which lists it again). A producer or worker that used the
// queue before lists it again, with the shard count it holds, within
// keyspace.RelistEvery of its next use (see ForgetIdle). The fencing counter of each
// shard stays (it never goes back), as does the per-minute history, which
// expires by itself.
func (b *Broker) forget(ctx context.Context, queue string) error {
	if err := b.mustKnow(ctx, queue); err != nil {
		// A sharded queue that ForgetIdle unlisted keeps its shard count:
		// it can still be forgotten for good.
		if !errors.Is(err, admin.ErrUnknownQueue) {
			return err
		}
		if ok, herr := b.rdb.HExists(ctx, keyspace.ShardsKey(b.ns), queue).Result(); herr != nil || !ok {
			return err
		}
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
		return fmt.Errorf("%w: queue %q received a job while it was being forgotten; it is kept", admin.ErrQueueNotEmpty, queue)
	}
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keyspace.ShardsKey(b.ns), queue)
		p.HDel(ctx, keyspace.QueuesSeenKey(b.ns), queue)
		return nil
	}); err != nil {
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
			return fmt.Errorf("%w: queue %q holds %s; nothing was changed", admin.ErrQueueNotEmpty, queue, strings.Join(left, ", "))
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			kk := keyCapKeysOf(k)
			p.Del(ctx, append(k.JobKeys(), kk.Run, kk.Caps, kk.HeldKeys, kk.Paused, kk.ParkedTypes, kk.Rates, kk.Wait, kk.Turn, kk.Weights)...)
			return nil
		})
		if errors.Is(err, redis.TxFailedErr) {
			return fmt.Errorf("%w: queue %q changed while it was being forgotten; nothing was changed", admin.ErrQueueNotEmpty, queue)
		}
		if err != nil {
			return queueErr(queue, err)
		}
		return nil
	}, watched...)
}

// minForgetIdle is the shortest idle time ForgetIdle takes: many times
// keyspace.RelistEvery, how often a process that uses a queue lists it
// again.
const minForgetIdle = admin.MinForgetIdle

// ForgetIdle unlists the queues nobody has used for idle (at least
// an hour) and that hold nothing, and returns their names: stats, the
// CLI, the dashboard and the metrics stop listing them, as after Forget.
// Workers call it for their namespace (worker.Options.ForgetIdleQueues,
// hourly); operators may too.
//
// Used means listed by a producer that placed jobs in it or a worker that
// served it: each lists the queues it uses again every
// keyspace.RelistEvery (a minute), recorded in ns:queues:seen. So a queue
// a live worker serves is never idle, and one forgotten while a producer
// still held it is listed again, with its jobs, within a minute of its next
// enqueue. Holds nothing means what Forget requires (no scheduled,
// processing, parked or held jobs, dead records, remembered unique ids or
// trimmed records waiting for a hook), and also no pause, cap, rate limit,
// key cap or paused key set: those are an operator's, and are kept with the queue. A
// queue with one shard loses its shard count too (it would get one shard
// again); a sharded queue keeps its count, so that every process agrees on
// it when the queue is used again (Forget removes it).
//
// Each queue's shards are checked, then it is unlisted and looked at
// again: a listing or a job that came meanwhile lists it again (a producer
// lists a queue before it stores jobs in it, so its next jobs are never
// left unlisted). Nothing is deleted but the name, its time and a single
// shard's count.
// Retained succeeded jobs (job.Retain) do not keep a queue listed: they
// stay readable by id (Broker.Job) until their retention ends. A queue
// listed before ns:queues:seen existed starts its idle time at
// this call. An idle below an hour is refused with an error wrapping
// job.ErrInvalid.
func (b *Broker) forgetIdle(ctx context.Context, idle time.Duration) ([]string, error) {
	if idle < minForgetIdle {
		return nil, fmt.Errorf("broker: %w: forget idle queues: idle time %s is below %s", job.ErrInvalid, idle, minForgetIdle)
	}
	var names *redis.StringSliceCmd
	var seen *redis.MapStringStringCmd
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		names = p.SMembers(ctx, keyspace.QueuesKey(b.ns))
		seen = p.HGetAll(ctx, keyspace.QueuesSeenKey(b.ns))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("broker: forget idle queues: %w", err)
	}
	now := b.createdNow()
	cutoff := now.Add(-idle).UnixMilli()
	listed := make(map[string]bool, len(names.Val()))
	var forgotten, unseen []string
	var errs []error
	for _, q := range names.Val() {
		listed[q] = true
		if naming.Queue(q) != nil {
			continue // not written by delayq
		}
		at, err := strconv.ParseInt(seen.Val()[q], 10, 64)
		if err != nil {
			unseen = append(unseen, q)
			continue
		}
		if at > cutoff {
			continue
		}
		ok, err := b.forgetQueueIfIdle(ctx, q, cutoff)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			forgotten = append(forgotten, q)
		}
	}
	var stale []string
	for q := range seen.Val() {
		if !listed[q] {
			stale = append(stale, q)
		}
	}
	if len(unseen) > 0 || len(stale) > 0 {
		if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, q := range unseen {
				p.HSetNX(ctx, keyspace.QueuesSeenKey(b.ns), q, now.UnixMilli())
			}
			for _, q := range stale {
				// Unlisted: its time is recorded again when it is used.
				p.HDel(ctx, keyspace.QueuesSeenKey(b.ns), q)
			}
			return nil
		}); err != nil {
			errs = append(errs, fmt.Errorf("broker: forget idle queues: %w", err))
		}
	}
	slices.Sort(forgotten)
	return forgotten, errors.Join(errs...)
}

// forgetQueueIfIdle unlists queue if it holds nothing and was not listed after
// cutoff (ms), and reports whether it did.
func (b *Broker) forgetQueueIfIdle(ctx context.Context, queue string, cutoff int64) (bool, error) {
	q, err := b.queue(ctx, queue)
	if err != nil {
		return false, err
	}
	for _, s := range q.Shards() {
		empty, err := b.idleShard(ctx, s)
		if err != nil {
			return false, queueErr(queue, err)
		}
		if !empty {
			return false, nil
		}
	}
	if err := b.rdb.SRem(ctx, keyspace.QueuesKey(b.ns), queue).Err(); err != nil {
		return false, queueErr(queue, err)
	}
	// Used meanwhile (a listing after the cutoff, or a job stored by a
	// producer that held the queue): list it again.
	at, err := b.rdb.HGet(ctx, keyspace.QueuesSeenKey(b.ns), queue).Int64()
	used := err != nil || at > cutoff
	for _, s := range q.Shards() {
		if used {
			break
		}
		n, err := b.rdb.Exists(ctx, s.Keys().Jobs, s.Keys().Scheduled).Result()
		used = err != nil || n > 0
	}
	if used {
		if err := b.rdb.SAdd(ctx, keyspace.QueuesKey(b.ns), queue).Err(); err != nil {
			return false, queueErr(queue, err)
		}
		return false, nil
	}
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keyspace.QueuesSeenKey(b.ns), queue)
		if len(q.Shards()) == 1 {
			p.HDel(ctx, keyspace.ShardsKey(b.ns), queue)
		}
		return nil
	}); err != nil {
		return true, queueErr(queue, err)
	}
	return true, nil
}

// idleShard reports whether shard s holds nothing and has no control set,
// reading every key it checks in one round trip.
func (b *Broker) idleShard(ctx context.Context, s keyspace.Shard) (bool, error) {
	k := s.Keys()
	kk := keyCapKeysOf(k)
	// keyrun stays with its encoding field (keyspace.EncodingField) once
	// key caps were used: it counts only with another field.
	var exist, run *redis.IntCmd
	var enc *redis.BoolCmd
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exist = p.Exists(ctx, k.Jobs, k.Dead, k.Unique, k.Processing, k.Scheduled, k.Trimmed, k.Controls, kk.Caps, kk.HeldKeys, kk.Paused, kk.Rates)
		run = p.HLen(ctx, kk.Run)
		enc = p.HExists(ctx, kk.Run, keyspace.EncodingField)
		return nil
	}); err != nil {
		return false, err
	}
	fields := run.Val()
	if enc.Val() {
		fields--
	}
	return exist.Val() == 0 && fields == 0, nil
}
