package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/job"
)

// Sharded queues.
//
// A queue declared with n > 1 shards is stored as n physical queues, each
// with keys of its own under its own hash tag, so that on a Redis Cluster
// each shard has its own slot. Shard k is named "q#k" (or "q#k.s", see
// shardName); job.ValidateQueue refuses '#', so the names cannot clash with
// a queue's. A job's shard is FNV-1a(id) mod n, so every operation that
// names a job (Cancel, Reschedule, Ack, Retry, DeadGet, Redrive, a duplicate
// id on Enqueue) goes straight to its shard. Operations on the queue as a
// whole (Claim, Reap, Stats, DeadPage, DeadPurge, DeadTrim) visit every
// shard. The public methods take the queue's name and map it here; the
// unexported claim, reap, stats, ... work on one physical queue.
//
// The count lives in Redis, in the hash ns:shards (queue -> n), so every
// producer and worker agrees on it. It is written once, by DeclareQueue or,
// as 1, by the first Enqueue to an undeclared queue, and never changes:
// DeclareQueue refuses another count with ErrShardCount. Brokers cache a
// count once read. A queue with no count yet is read as unsharded and
// looked up again after undeclaredTTL, which is safe because jobs reach a
// queue only through Enqueue, and Enqueue fixes the count before it writes.

// MaxShards is the most shards a queue may have.
const MaxShards = 256

// ErrShardCount: DeclareQueue asked for a shard count other than the one the
// queue already has (or to shard a queue that already holds unsharded
// jobs). Nothing was changed.
var ErrShardCount = errors.New("broker: a queue's shard count cannot be changed")

// undeclaredTTL is how long a broker trusts that a queue has no declared
// shard count before it looks again.
const undeclaredTTL = 2 * time.Second

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// shardRetry bounds the Next of a Claim on a sharded queue when a shard
// failed, so that the worker tries it again soon.
const shardRetry = 200 * time.Millisecond

func shardsKey(ns string) string { return ns + ":shards" }

// shardSet is the physical queues of one queue, names[k] being shard k.
type shardSet struct {
	names []string
}

// shardCache holds the shard counts a broker has read, and the rotation
// that spreads claims over shards.
type shardCache struct {
	known     sync.Map // queue -> *shardSet, read from Redis; never changes
	undecided sync.Map // queue -> time.Time, when Redis last had no count for it
	turn      atomic.Uint32
}

func newShardSet(queue string, n int) *shardSet {
	if n == 1 {
		return &shardSet{names: []string{queue}}
	}
	s := &shardSet{names: make([]string, n)}
	for k := range n {
		s.names[k] = shardName(queue, k, n)
	}
	return s
}

// of returns the physical queue that holds the job with id.
func (s *shardSet) of(id string) string {
	if len(s.names) == 1 {
		return s.names[0]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return s.names[h.Sum32()%uint32(len(s.names))]
}

// shardName returns the name of shard k of n of queue: "q#k", or "q#k.s"
// for the smallest s >= 1 that puts its hash slot into the middle half of
// the k-th n-th of the slot space. A cluster made by redis-cli --cluster
// create gives each master one contiguous, equal range of slots, so n
// shards spread over m masters as evenly as n allows (one per master when
// n = m) instead of landing where their names happen to hash.
func shardName(queue string, k, n int) string {
	base := queue + "#" + strconv.Itoa(k)
	from := k * clusterSlots / n
	width := (k+1)*clusterSlots/n - from
	lo, hi := from+width/4, from+width-width/4
	name := base
	for s := 1; s <= 1<<20; s++ {
		if sl := slot(name); sl >= lo && sl < hi {
			return name
		}
		name = base + "." + strconv.Itoa(s)
	}
	return base // unreachable in practice: CRC16 covers every window
}

// logicalQueue returns the queue a physical queue belongs to.
func logicalQueue(physical string) string {
	if i := strings.IndexByte(physical, '#'); i >= 0 {
		return physical[:i]
	}
	return physical
}

// slot returns the Redis Cluster hash slot of a hash tag: CRC16 (XMODEM)
// modulo 16384.
func slot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}

// shards returns the physical queues of queue. With create, a queue without
// a count gets 1 and is added to ns:queues (what Enqueue needs); without,
// it is read as unsharded for undeclaredTTL.
func (b *Broker) shards(ctx context.Context, queue string, create bool) (*shardSet, error) {
	if v, ok := b.shardCache.known.Load(queue); ok {
		return v.(*shardSet), nil
	}
	if !create {
		if v, ok := b.shardCache.undecided.Load(queue); ok && time.Since(v.(time.Time)) < undeclaredTTL {
			return &shardSet{names: []string{queue}}, nil
		}
		raw, err := b.rdb.HGet(ctx, shardsKey(b.ns), queue).Result()
		if errors.Is(err, redis.Nil) {
			b.shardCache.undecided.Store(queue, time.Now())
			return &shardSet{names: []string{queue}}, nil
		}
		if err != nil {
			return nil, err
		}
		return b.cacheShards(queue, raw)
	}
	raw, err := b.declare(ctx, queue, 1)
	if errors.Is(err, ErrNotReplicated) && raw != "" {
		// The jobs that follow wait for replicas themselves; and a lost
		// implicit count is written again, the same, by the next Enqueue.
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return b.cacheShards(queue, raw)
}

func (b *Broker) cacheShards(queue, raw string) (*shardSet, error) {
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > MaxShards {
		return nil, fmt.Errorf("broker: queue %q has a stored shard count %q that is not a number from 1 to %d", queue, raw, MaxShards)
	}
	s := newShardSet(queue, n)
	v, _ := b.shardCache.known.LoadOrStore(queue, s)
	b.shardCache.undecided.Delete(queue)
	return v.(*shardSet), nil
}

// declare adds queue to ns:queues and sets its shard count to n unless it
// has one, and returns the count it has. A durable broker waits for
// replicas; when they fall short, the count read is returned with the error.
func (b *Broker) declare(ctx context.Context, queue string, n int) (string, error) {
	if err := b.rdb.SAdd(ctx, queuesKey(b.ns), queue).Err(); err != nil {
		return "", err
	}
	var get *redis.StringCmd
	err := b.pipelined(ctx, shardsKey(b.ns), func(p redis.Pipeliner) {
		p.HSetNX(ctx, shardsKey(b.ns), queue, n)
		get = p.HGet(ctx, shardsKey(b.ns), queue)
		if b.opts.WaitReplicas > 0 {
			// A write that changes nothing, so that WAIT covers a count
			// another call stored (see durable.go).
			p.HIncrBy(ctx, shardsKey(b.ns), queue, 0)
		}
	})
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return "", err
	}
	return get.Val(), err
}

// DeclareQueue fixes the number of shards of queue, from 1 to MaxShards.
// Declare a sharded queue in every process that uses it, before it
// enqueues or works: a queue that is used undeclared gets one shard for
// good. Declaring the count a queue already has does nothing; any other
// count fails with an error wrapping ErrShardCount, as does sharding a
// queue that still holds jobs stored before it was declared. The count
// cannot be changed while the queue exists; to shard a busy queue, declare
// a new queue and move producers to it while workers drain the old one.
func (b *Broker) DeclareQueue(ctx context.Context, queue string, shards int) error {
	if err := job.ValidateQueue(queue); err != nil {
		return err
	}
	if shards < 1 || shards > MaxShards {
		return fmt.Errorf("broker: %w: queue %q: %d shards; want 1 to %d", job.ErrInvalid, queue, shards, MaxShards)
	}
	if shards > 1 {
		k := b.keys(queue)
		n, err := b.rdb.Exists(ctx, k.scheduled, k.processing, k.jobs, k.dead).Result()
		if err != nil {
			return queueErr(queue, err)
		}
		if n > 0 {
			return fmt.Errorf("%w: queue %q holds unsharded jobs or dead records; shard a new queue instead", ErrShardCount, queue)
		}
	}
	raw, err := b.declare(ctx, queue, shards)
	if err != nil {
		return queueErr(queue, err) // stored or not, declaring again is safe
	}
	s, err := b.cacheShards(queue, raw)
	if err != nil {
		return err
	}
	if have := len(s.names); have != shards {
		return fmt.Errorf("%w: queue %q has %d shard(s), not %d", ErrShardCount, queue, have, shards)
	}
	return nil
}

// Shard is one physical queue of a queue.
type Shard struct {
	Name string // "q" for an unsharded queue, "q#k" or "q#k.s" for shard k
	Slot int    // the Redis Cluster hash slot of its keys
}

// Shards returns the physical queues of queue, shard k at index k: one
// (the queue itself) unless it was declared with more. Its keys are
// ns:{Name}:scheduled and so on.
func (b *Broker) Shards(ctx context.Context, queue string) ([]Shard, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return nil, err
	}
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return nil, queueErr(queue, err)
	}
	out := make([]Shard, len(s.names))
	for i, name := range s.names {
		out[i] = Shard{Name: name, Slot: slot(name)}
	}
	return out, nil
}

// locate returns the physical queue that holds job id of queue.
func (b *Broker) locate(ctx context.Context, queue, id string) (string, error) {
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return "", err
	}
	return s.of(id), nil
}

// placeAll groups envelopes by the physical queue of each, fixing the
// shard count of queues used for the first time; order lists the physical
// queues in first-seen order.
func (b *Broker) placeAll(ctx context.Context, envs []*job.Envelope) (order []string, groups map[string][]int, err error) {
	groups = make(map[string][]int, 1)
	for i, env := range envs {
		s, err := b.shards(ctx, env.Queue, true)
		if err != nil {
			return nil, nil, queueErr(env.Queue, err)
		}
		q := s.of(env.ID)
		if _, ok := groups[q]; !ok {
			order = append(order, q)
		}
		groups[q] = append(groups[q], i)
	}
	return order, groups, nil
}

// leaseGroups groups leases by the physical queue of each.
func (b *Broker) leaseGroups(ctx context.Context, leases []Lease) (map[string][]int, error) {
	g := make(map[string][]int, 1)
	for i, l := range leases {
		q, err := b.locate(ctx, l.Queue, l.ID)
		if err != nil {
			return nil, queueErr(l.Queue, err)
		}
		g[q] = append(g[q], i)
	}
	return g, nil
}

// rotation returns the shards of s starting at the next one in turn, so
// that claims and reaps spread over them.
func (b *Broker) rotation(s *shardSet) []string {
	n := len(s.names)
	start := int(b.shardCache.turn.Add(1) % uint32(n))
	return append(slices.Clone(s.names[start:]), s.names[:start]...)
}

// relabel gives claimed jobs of a shard their queue's name.
func relabel(cs []Claimed, queue string) {
	for i := range cs {
		cs[i].Queue = queue
		if cs[i].Envelope != nil {
			cs[i].Envelope.Queue = queue
		}
	}
}

// claimShards claims from the shards of queue in turn, each asked for what
// the earlier ones left of n, until n jobs are claimed or every shard was
// asked. A shard that fails is skipped, and the result's Next is then at
// most shardRetry away so that the caller comes back for it soon; only
// when every shard fails is the error returned. Times come from the first
// shard that answered: each shard's Next is taken relative to its own
// server's clock.
func (b *Broker) claimShards(ctx context.Context, queue string, n int, lease time.Duration) (ClaimResult, error) {
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return ClaimResult{}, queueErr(queue, err)
	}
	if len(s.names) == 1 {
		return b.claim(ctx, s.names[0], n, lease)
	}
	var (
		out      ClaimResult
		answered bool
		errs     []error
		wait     time.Duration = -1
	)
	for _, name := range b.rotation(s) {
		res, err := b.claim(ctx, name, max(n-len(out.Jobs), 0), lease)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !answered {
			out.Now, answered = res.Now, true
		}
		if !res.Next.IsZero() {
			if d := max(res.Next.Sub(res.Now), 0); wait < 0 || d < wait {
				wait = d
			}
		}
		relabel(res.Jobs, queue)
		out.Jobs = append(out.Jobs, res.Jobs...)
		out.Orphans = append(out.Orphans, res.Orphans...)
		if n > 0 && len(out.Jobs) >= n {
			break
		}
	}
	if !answered {
		return ClaimResult{}, errors.Join(errs...)
	}
	if len(errs) > 0 && (wait < 0 || wait > shardRetry) {
		wait = shardRetry
	}
	if wait >= 0 {
		out.Next = out.Now.Add(wait)
	}
	return out, nil
}

// reapShards lists up to limit expired leases over the shards of queue,
// starting at the next shard in turn. Shards that fail are skipped unless
// all do.
func (b *Broker) reapShards(ctx context.Context, queue string, limit int) (ReapResult, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return ReapResult{}, err
	}
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return ReapResult{}, queueErr(queue, err)
	}
	if len(s.names) == 1 {
		return b.reap(ctx, s.names[0], limit)
	}
	var (
		out      ReapResult
		answered bool
		errs     []error
	)
	for _, name := range b.rotation(s) {
		left := limit
		if limit > 0 {
			if left = limit - len(out.Jobs); left <= 0 {
				break
			}
		}
		res, err := b.reap(ctx, name, left)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !answered {
			out.Now, answered = res.Now, true
		}
		relabel(res.Jobs, queue)
		out.Jobs = append(out.Jobs, res.Jobs...)
		out.Orphans = append(out.Orphans, res.Orphans...)
	}
	if !answered {
		return ReapResult{}, errors.Join(errs...)
	}
	return out, nil
}

// statsShards sums the stats of the shards of queue. OldestDue and
// NextReady are the extremes over shards, each moved from its shard's
// clock to the first shard's.
func (b *Broker) statsShards(ctx context.Context, queue string) (QueueStats, error) {
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return QueueStats{}, queueErr(queue, err)
	}
	if len(s.names) == 1 {
		return b.stats(ctx, queue)
	}
	out := QueueStats{Queue: queue}
	for i, name := range s.names {
		st, err := b.stats(ctx, name)
		if err != nil {
			return QueueStats{}, err
		}
		if i == 0 {
			out.Now = st.Now
		}
		out.Scheduled += st.Scheduled
		out.Due += st.Due
		out.Processing += st.Processing
		out.Dead += st.Dead
		if !st.OldestDue.IsZero() {
			if t := out.Now.Add(st.OldestDue.Sub(st.Now)); out.OldestDue.IsZero() || t.Before(out.OldestDue) {
				out.OldestDue = t
			}
		}
		if !st.NextReady.IsZero() {
			if t := out.Now.Add(st.NextReady.Sub(st.Now)); out.NextReady.IsZero() || t.Before(out.NextReady) {
				out.NextReady = t
			}
		}
	}
	return out, nil
}

// deadPageShards merges the pages of every shard: each shard's next limit
// records after the cursor hold the merged next limit, newest first (by
// died-at, then id descending, as within one shard).
func (b *Broker) deadPageShards(ctx context.Context, queue string, after DeadCursor, limit int) ([]*DeadRecord, DeadCursor, error) {
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return nil, DeadCursor{}, queueErr(queue, err)
	}
	if len(s.names) == 1 {
		return b.deadPage(ctx, queue, after, limit)
	}
	var all []*DeadRecord
	more := false
	for _, name := range s.names {
		recs, next, err := b.deadPage(ctx, name, after, limit)
		if err != nil {
			return nil, DeadCursor{}, err
		}
		all = append(all, recs...)
		more = more || !next.IsZero()
	}
	slices.SortFunc(all, func(x, y *DeadRecord) int {
		if c := y.DiedAt.Compare(x.DiedAt); c != 0 {
			return c
		}
		return strings.Compare(y.ID, x.ID)
	})
	if len(all) > limit {
		all, more = all[:limit], true
	}
	var next DeadCursor
	if more && len(all) > 0 {
		last := all[len(all)-1]
		next = DeadCursor{DiedAt: last.DiedAt, ID: last.ID}
	}
	return all, next, nil
}

// perShard runs op once per shard of queue with the ids of that shard and
// puts the outcome back in order: nil, or a *job.BatchError aligned with
// ids (a single id's error as is).
func (b *Broker) perShard(ctx context.Context, queue string, ids []string, op func(physical string, ids []string) error) error {
	if len(ids) == 0 {
		return nil
	}
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return queueErr(queue, err)
	}
	if len(s.names) == 1 {
		return op(s.names[0], ids)
	}
	groups := make(map[string][]int)
	var order []string
	for i, id := range ids {
		q := s.of(id)
		if _, ok := groups[q]; !ok {
			order = append(order, q)
		}
		groups[q] = append(groups[q], i)
	}
	errs := make([]error, len(ids))
	failed := false
	for _, q := range order {
		idx := groups[q]
		sub := make([]string, len(idx))
		for j, i := range idx {
			sub[j] = ids[i]
		}
		err := op(q, sub)
		var be *job.BatchError
		for j, i := range idx {
			switch {
			case err == nil:
			case len(idx) > 1 && errors.As(err, &be) && len(be.Errs) == len(idx):
				errs[i] = be.Errs[j]
			default:
				errs[i] = err
			}
			failed = failed || errs[i] != nil
		}
	}
	switch {
	case !failed:
		return nil
	case len(ids) == 1:
		return errs[0]
	default:
		return &job.BatchError{Errs: errs}
	}
}

// sumShards adds up op over the shards of queue.
func (b *Broker) sumShards(ctx context.Context, queue string, op func(physical string) (int64, error)) (int64, error) {
	s, err := b.shards(ctx, queue, false)
	if err != nil {
		return 0, queueErr(queue, err)
	}
	var total int64
	for _, name := range s.names {
		n, err := op(name)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
