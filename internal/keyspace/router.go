package keyspace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MaxShards is the most shards a queue may have.
const MaxShards = 256

// DefaultNamespace is the namespace of a broker (and of the other
// components) whose options name none.
const DefaultNamespace = "delayq"

// ErrShardCount: a queue was declared with a shard count other than the one
// it has (or sharded while it holds unsharded jobs).
var ErrShardCount = errors.New("broker: a queue's shard count cannot be changed")

// Counts is where a Router reads and stores shard counts (in Redis, the
// hash ShardsKey(ns); see package broker).
type Counts interface {
	// Count returns the stored count of queue; ok is false when none is
	// stored yet.
	Count(ctx context.Context, queue string) (n int, ok bool, err error)
	// Store sets the count of queue to n unless it has one, and returns the
	// count it has (n, or the one stored before). It also adds queue to
	// the set of known queues, and records that it was used now. An error with a count above 0 means the
	// count was read but the write is not confirmed (durable mode): storing
	// again is safe.
	Store(ctx context.Context, queue string, n int) (int, error)
	// Occupied reports whether a physical queue holds jobs or dead records.
	Occupied(ctx context.Context, s Shard) (bool, error)
}

// UndeclaredTTL is how long a Router trusts that a queue has no stored
// shard count before it looks again.
const UndeclaredTTL = 2 * time.Second

// RelistEvery is how often a Router lists again a queue it places jobs in
// (Place) or works (Touch): Counts.Store adds it to the set of known queues
// and records when it was last used, so that a queue forgotten for being
// idle (while this process held its count) is listed again within this
// time of its next use.
const RelistEvery = time.Minute

// Router resolves queue names to Queues. A count, once read, never changes
// (it is written once and never changed, see Declare), so a Router caches
// it for good. A queue with no count yet is read as unsharded and looked up
// again after UndeclaredTTL; that is safe because jobs reach a queue only
// through Place, which stores the count before anything is written. It is
// safe for concurrent use.
type Router struct {
	ns        string
	counts    Counts
	known     sync.Map // queue -> Queue
	undecided sync.Map // queue -> time.Time, when it last had no count
	listed    sync.Map // queue -> time.Time, when this Router last stored it (Counts.Store)
	now       func() time.Time
}

// NewRouter returns a Router for the keys of namespace ns.
func NewRouter(ns string, counts Counts) *Router {
	return &Router{ns: ns, counts: counts, now: time.Now}
}

// Queue resolves a queue for reading or for changing jobs it holds. It
// stores nothing: a queue without a stored count has one shard.
func (r *Router) Queue(ctx context.Context, name string) (Queue, error) {
	if q, ok := r.known.Load(name); ok {
		return q.(Queue), nil
	}
	if at, ok := r.undecided.Load(name); ok && time.Since(at.(time.Time)) < UndeclaredTTL {
		return newQueue(r.ns, name, 1), nil
	}
	n, ok, err := r.counts.Count(ctx, name)
	if err != nil {
		return Queue{}, err
	}
	if !ok {
		r.undecided.Store(name, time.Now())
		return newQueue(r.ns, name, 1), nil
	}
	return r.cache(name, n)
}

// Place resolves a queue to store new jobs in: a queue used for the first
// time gets one shard, for good.
func (r *Router) Place(ctx context.Context, name string) (Queue, error) {
	if q, ok := r.known.Load(name); ok {
		r.relist(ctx, q.(Queue))
		return q.(Queue), nil
	}
	n, err := r.counts.Store(ctx, name, 1)
	if err != nil && n <= 0 {
		return Queue{}, err
	}
	r.listed.Store(name, r.now())
	// An unconfirmed count is fine here: the jobs that follow wait for
	// replicas themselves, and a lost count is stored again, the same, by
	// the next Place.
	return r.cache(name, n)
}

// Declare fixes the shard count of a queue, from 1 to MaxShards. Declaring
// the count a queue has changes nothing; another count fails with an error
// wrapping ErrShardCount, as does sharding a queue that holds jobs stored
// unsharded.
func (r *Router) Declare(ctx context.Context, name string, n int) (Queue, error) {
	if n < 1 || n > MaxShards {
		return Queue{}, fmt.Errorf("queue %q: %d shards; want 1 to %d", name, n, MaxShards)
	}
	if n > 1 {
		unsharded := newQueue(r.ns, name, 1).shards[0]
		busy, err := r.counts.Occupied(ctx, unsharded)
		if err != nil {
			return Queue{}, err
		}
		if busy {
			return Queue{}, fmt.Errorf("%w: queue %q holds unsharded jobs or dead records; shard a new queue instead", ErrShardCount, name)
		}
	}
	have, err := r.counts.Store(ctx, name, n)
	if err != nil {
		return Queue{}, err // stored or not, declaring again is safe
	}
	r.listed.Store(name, r.now())
	q, err := r.cache(name, have)
	if err != nil {
		return Queue{}, err
	}
	if have != n {
		return Queue{}, fmt.Errorf("%w: queue %q has %d shard(s), not %d", ErrShardCount, name, have, n)
	}
	return q, nil
}

// SetClock makes the Router read the time from now (for RelistEvery)
// instead of time.Now: a broker with a clock of its own (tests).
func (r *Router) SetClock(now func() time.Time) { r.now = now }

// Touch lists a queue again, as Place does, when this Router has its
// count cached and has not stored it for RelistEvery: a worker calls it for
// the queues it serves. A queue whose count it has not cached (one with no
// stored count: unused, or a typo) is left alone.
func (r *Router) Touch(ctx context.Context, name string) {
	if q, ok := r.known.Load(name); ok {
		r.relist(ctx, q.(Queue))
	}
}

// relist stores q's count again (which lists it, see Counts.Store) when
// this Router has not for RelistEvery. It is best effort: a failure leaves
// the queue's use unharmed, and the next call tries again.
func (r *Router) relist(ctx context.Context, q Queue) {
	now := r.now()
	if at, ok := r.listed.Load(q.Name()); ok && now.Sub(at.(time.Time)) < RelistEvery {
		return
	}
	r.listed.Store(q.Name(), now)
	if _, err := r.counts.Store(ctx, q.Name(), len(q.Shards())); err != nil {
		r.listed.Delete(q.Name())
	}
}

func (r *Router) cache(name string, n int) (Queue, error) {
	if n < 1 || n > MaxShards {
		return Queue{}, fmt.Errorf("queue %q has a stored shard count %d that is not from 1 to %d", name, n, MaxShards)
	}
	q, _ := r.known.LoadOrStore(name, newQueue(r.ns, name, n))
	r.undecided.Delete(name)
	return q.(Queue), nil
}
