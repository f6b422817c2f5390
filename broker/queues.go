package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// Sharded queues.
//
// A queue declared with n > 1 shards is stored as n physical queues, each
// with keys of its own under its own hash tag, so that on a Redis Cluster
// each shard has its own slot (names and routing: internal/keyspace). Every
// method that names a job goes straight to its shard; methods on a queue as
// a whole visit every shard and merge what they read.
//
// The count lives in Redis, in the hash ns:shards (queue -> n), so every
// producer and worker agrees on it. It is written once, by DeclareQueue or,
// as 1, by the first Enqueue to an undeclared queue, and never changes.

// maxShards is the most shards a queue may have.
const maxShards = keyspace.MaxShards

// ErrShardCount: DeclareQueue asked for a shard count other than the one the
// queue already has (or to shard a queue that already holds unsharded
// jobs). Nothing was changed.
var ErrShardCount = keyspace.ErrShardCount

// DeclareQueue fixes the number of shards of queue, from 1 to 256.
// Declare a sharded queue in every process that uses it, before it
// enqueues or works: a queue that is used undeclared gets one shard for
// good. Declaring the count a queue already has does nothing; any other
// count fails with an error wrapping ErrShardCount, as does sharding a
// queue that still holds jobs stored before it was declared. The count
// cannot be changed while the queue exists; to shard a busy queue, declare
// a new queue and move producers to it while workers drain the old one.
func (b *Broker) DeclareQueue(ctx context.Context, queue string, shards int) error {
	if err := naming.Queue(queue); err != nil {
		return err
	}
	if shards < 1 || shards > maxShards {
		return fmt.Errorf("broker: %w: queue %q: %d shards; want 1 to %d", job.ErrInvalid, queue, shards, maxShards)
	}
	if _, err := b.route.Declare(ctx, queue, shards); err != nil {
		if errors.Is(err, ErrShardCount) {
			return err
		}
		return queueErr(queue, err)
	}
	return nil
}

// shards returns the physical queues of queue (admin.Broker.Shards).
func (b *Broker) shards(ctx context.Context, queue string) ([]admin.Shard, error) {
	q, err := b.queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	out := make([]admin.Shard, len(q.Shards()))
	for i, s := range q.Shards() {
		out[i] = admin.Shard{Name: s.Name(), Slot: s.Slot()}
	}
	return out, nil
}

// shardCounts keeps the shard counts of a broker's queues in Redis, for
// its keyspace.Router.
type shardCounts struct{ b *Broker }

func (c shardCounts) Count(ctx context.Context, queue string) (int, bool, error) {
	raw, err := c.b.rdb.HGet(ctx, keyspace.ShardsKey(c.b.ns), queue).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		return 0, false, badCount(c.b.ns, queue, raw)
	}
	return n, true, nil
}

// Store adds queue to ns:queues, records that it was used now (in
// ns:queues:seen, for ForgetIdle) and sets its shard count to n unless it
// has one, and returns the count it has. A durable broker waits for
// replicas; when they fall short, the count read is returned with the
// error.
func (c shardCounts) Store(ctx context.Context, queue string, n int) (int, error) {
	b := c.b
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, keyspace.QueuesKey(b.ns), queue)
		p.HSet(ctx, keyspace.QueuesSeenKey(b.ns), queue, b.createdNow().UnixMilli())
		return nil
	}); err != nil {
		return 0, err
	}
	key := keyspace.ShardsKey(b.ns)
	var get *redis.StringCmd
	err := b.pipelined(ctx, key, func(p redis.Pipeliner) {
		p.HSetNX(ctx, key, queue, n)
		get = p.HGet(ctx, key, queue)
		if b.opts.WaitReplicas > 0 {
			// A write that changes nothing, so that WAIT covers a count
			// another call stored (see run.go).
			p.HIncrBy(ctx, key, queue, 0)
		}
	})
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return 0, err
	}
	have, perr := strconv.Atoi(get.Val())
	if perr != nil {
		return 0, badCount(b.ns, queue, get.Val())
	}
	return have, err
}

// badCount is the error of a shard count that is not a number: it names
// the record, so that an operator can repair it (HSET ns:shards queue n).
func badCount(ns, queue, raw string) error {
	return fmt.Errorf("its shard count is %q, not a number (field %q of %s)", raw, queue, keyspace.ShardsKey(ns))
}

func (c shardCounts) Occupied(ctx context.Context, s keyspace.Shard) (bool, error) {
	k := s.Keys()
	n, err := c.b.rdb.Exists(ctx, k.Scheduled, k.Processing, k.Jobs, k.Dead).Result()
	return n > 0, err
}

// group groups indexes by the shard at each, in first-seen order of the
// shards.
func group(shards []keyspace.Shard) (order []keyspace.Shard, groups map[string][]int) {
	groups = make(map[string][]int, 1)
	for i, s := range shards {
		if _, ok := groups[s.Name()]; !ok {
			order = append(order, s)
		}
		groups[s.Name()] = append(groups[s.Name()], i)
	}
	return order, groups
}

// perShard runs op once per shard of queue with the ids of that shard and
// puts the outcome back in order: nil, or a *job.BatchError aligned with
// ids (a single id's error as is). op returns one error per id it got.
func (b *Broker) perShard(ctx context.Context, queue string, ids []string, op func(s keyspace.Shard, ids []string) []error) error {
	if len(ids) == 0 {
		return nil
	}
	q, err := b.queue(ctx, queue)
	if err != nil {
		return err
	}
	shards := make([]keyspace.Shard, len(ids))
	for i, id := range ids {
		shards[i] = q.Route(id)
	}
	errs := make([]error, len(ids))
	order, groups := group(shards)
	for _, s := range order {
		idx := groups[s.Name()]
		sub := make([]string, len(idx))
		for j, i := range idx {
			sub[j] = ids[i]
		}
		for j, e := range op(s, sub) {
			errs[idx[j]] = e
		}
	}
	return batchErr(errs)
}
