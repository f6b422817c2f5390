package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// keyCapKeys are the keys of the per-key caps of one shard, beside its
// other keys (same hash tag). A key's held jobs are in the shard's held
// prefix .. "#" .. key ('#' is in no type name, so no type's held set has
// that name).
type keyCapKeys struct {
	Run      string // HASH key -> jobs of the key leased under its cap
	Caps     string // HASH key -> "share/total": the keys' own caps
	HeldKeys string // ZSET key -> how many of its jobs its cap or pause holds
	Paused   string // HASH key -> paused at ms: the paused keys
	Rates    string // HASH key -> its own rate limit, as the "r" fields of Controls
	Wait     string // ZSET key -> ms of its next token: keys holding jobs for want of one
	Tat      string // prefix of the STRINGs key -> GCRA state of its rate limit
	Turn     string // ZSET key -> its place in the fair turns ('#': the jobs without a key)
	Weights  string // HASH key -> its weight in the fair turns (only keys not of weight 1)
	// ParkedTypes is not a per-key key but lives here for the same
	// reason: built once per shard. HASH type -> its jobs in the parked
	// set (jobs of paused types set aside by the claim).
	ParkedTypes string
}

// keyCapKeysOf names them for shard k. Every claim and settle needs
// them: they are built once per shard (the first maxKeyCapCache shards a
// process meets; beyond that, per call), so that a claim of jobs without
// keys allocates nothing for them.
func keyCapKeysOf(k keyspace.Keys) keyCapKeys {
	if v, ok := keyCapCache.Load(k.Held); ok {
		return v.(keyCapKeys)
	}
	p := strings.TrimSuffix(k.Held, "held:")
	kk := keyCapKeys{Run: p + "keyrun", Caps: p + "keycaps", HeldKeys: p + "keyheld", Paused: p + "keypaused",
		Rates: p + "keyrates", Wait: p + "keywait", Tat: p + "keytat:", Turn: p + "keyturn", Weights: p + "keyweights", ParkedTypes: p + "parkedtypes"}
	if keyCapCached.Add(1) <= maxKeyCapCache {
		keyCapCache.Store(k.Held, kk)
	}
	return kk
}

// maxKeyCapCache bounds keyCapCache: a process that meets more shards
// (queues of every namespace it serves) builds the names of the others
// per call.
const maxKeyCapCache = 10_000

var (
	keyCapCache  sync.Map // held prefix of a shard -> keyCapKeys
	keyCapCached atomic.Int64
)

// SetKeyConcurrency caps how many jobs of each key (job.Key, job.KeyFrom)
// run at once in queue across all workers: with key "" the default of
// every key of the queue, else key's own cap, which wins over the default
// (a premium customer's 10 where the rest get 2). n = 0 clears it: a
// cleared default leaves keys without a cap of their own uncapped, a
// cleared key's cap leaves the key to the default. Jobs without a key
// are not counted nor held.
//
// A job counts from its claim until its lease ends, as for SetConcurrency;
// a crashed worker's job stops counting when the reaper ends its expired
// lease. It is enforced in the claim script: a due job of a key at its cap
// is held aside (no attempt spent, other keys' jobs still claimed) until a
// job of its key ends, which moves one of them back to the schedule and
// wakes the queue's workers. A change (set, raised, lowered, cleared)
// takes effect at once for the jobs already waiting: the jobs the cap
// held go back to the schedule (every key's for the default) and the
// workers are woken; the next claims hold again what the new cap leaves
// no room for. A key's cap counts the jobs claimed since a key cap was
// set in the queue.
//
// A sharded queue's cap is split among its shards as SetConcurrency's is
// (shard i gets n/S, the first n mod S one more), since a key's jobs are
// spread over the shards, so n must be at least the number of shards. Bad
// input (a negative n, n below the shard count, a bad queue name or key)
// is refused with an error wrapping job.ErrInvalid, and nothing changes.
// See docs/flow-control.md#per-key-caps.
func (b *Broker) SetKeyConcurrency(ctx context.Context, queue, key string, n int) error {
	if key != "" {
		if err := naming.Key(key); err != nil {
			return err
		}
	}
	if err := naming.Queue(queue); err != nil {
		return err
	}
	shards, values, err := b.capShares(ctx, queue, "key concurrency cap", n)
	if err != nil {
		return err
	}
	for i, s := range shards {
		value := values[i]
		k := s.Keys()
		kk := keyCapKeysOf(k)
		if _, err := b.run(ctx, keyCapScript, []string{k.Controls, kk.Caps, kk.HeldKeys, k.Scheduled, k.Held}, key, value, k.Wake); err != nil {
			return queueErr(queue, err)
		}
	}
	return nil
}

// SetKeyRateLimit limits how many jobs of each key (job.Key, job.KeyFrom)
// start per period in queue across all workers, as SetRateLimit limits a
// type: with key "" the default of every key of the queue, else key's own
// limit, which wins over the default (a premium customer's 10/s where the
// rest get 2/s). A zero r (Count 0) clears it: a cleared default leaves
// keys without a limit of their own unlimited, a cleared key's limit
// leaves the key to the default. Jobs without a key are not limited.
//
// Each key has its own bucket: GCRA with r.Burst, or with r.Strict a
// sliding window of r.Per + r.Slack that never admits more than r.Count
// claims. It is enforced in the claim script, after the key's pause and
// its concurrency cap (a job they hold spends no token): a due job of a
// key without a token is held aside with its ready time, as one at its
// key's cap (no attempt spent, other keys' jobs still claimed, counted in
// job.QueueStats.HeldByKey and listed by HeldKeys with reason "rate"),
// and its key waits in a sorted set for its next token; the claims take
// the keys whose token has come and start their held jobs first,
// earliest ready first. Workers sleep until the earliest of those tokens.
//
// A change takes effect for the jobs already waiting at the next claim,
// and the queue's workers are woken: a set or changed limit makes every
// key it applies to read its bucket again under the new limit, and a
// cleared one sends the held jobs of its keys back to the schedule (the
// next claims hold again what a cap or pause still holds). A sharded
// queue's limit is split among its shards as SetRateLimit's is (a
// key's jobs are spread over them). Bad input (as for SetRateLimit, or a
// bad queue name or key) is refused with an error wrapping
// job.ErrInvalid, and nothing changes. Redis keeps, per key that started
// a job within its period, one small string (GCRA) or one sorted set of
// at most Count entries (strict), each expiring by itself; see
// docs/flow-control.md#per-key-rate-limits.
func (b *Broker) SetKeyRateLimit(ctx context.Context, queue, key string, r job.RateLimit) error {
	if key != "" {
		if err := naming.Key(key); err != nil {
			return err
		}
	}
	if err := rules.CheckRateLimit(r); err != nil {
		return err
	}
	if err := naming.Queue(queue); err != nil {
		return err
	}
	q, err := b.route.Place(ctx, queue)
	if err != nil {
		return queueErr(queue, err)
	}
	shards := q.Shards()
	values, err := rateShares(queue, r, len(shards))
	if err != nil {
		return err
	}
	for i, s := range shards {
		k := s.Keys()
		kk := keyCapKeysOf(k)
		if _, err := b.run(ctx, keyRateScript, []string{k.Controls, kk.Rates, kk.HeldKeys, k.Scheduled, k.Held, kk.Wait, kk.Tat, k.Window}, key, values[i], k.Wake); err != nil {
			return queueErr(queue, err)
		}
	}
	return nil
}

// SetKeyFairness turns fair turns between keys (job.Key, job.KeyFrom) on
// or off in queue. While on, a claim deals its room out among the keys
// with due jobs in turns, an equal share each (the jobs without a key
// taking their turns as one key), instead of taking due jobs in ready
// order: one key's backlog of due jobs delays another key's due job by
// at most one turn of the keys ahead of it, across all workers and
// shards, where in ready order it would wait behind the whole backlog.
// Within a key, jobs start in ready order.
//
// A due job with a key waits for its turn in its key's held set (as a
// key's cap holds it: pending, found, cancelled, rescheduled and replaced
// as scheduled, counted in job.QueueStats.HeldByKey; HeldKeys lists the
// keys waiting for a turn with reason "turn"), and its key joins the turns
// at the back: an enqueue puts a job stored due there at once, and the
// claims move there the jobs that become due later, up to 1,000 due jobs
// a claim. The jobs a turn chooses go through every other
// control as before: the key's pause, cap and rate limit, the type's and
// the queue's. A key whose job its own controls hold leaves the turns
// until they send its jobs back. Turned off, the keys waiting for a turn
// send their held jobs back to the schedule. Either way the queue's
// workers are woken. It applies on every shard of a sharded queue; bad
// queue names are refused with an error wrapping job.ErrInvalid. See
// docs/flow-control.md#fair-turns-between-keys.
func (b *Broker) SetKeyFairness(ctx context.Context, queue string, on bool) error {
	_, err := b.onPlacedShards(ctx, queue, func(k keyspace.Keys, kk keyCapKeys) (int64, error) {
		_, err := b.run(ctx, keyFairScript, []string{k.Controls, kk.Turn, kk.HeldKeys, k.Scheduled, k.Held}, flag(on), k.Wake)
		return 0, err
	})
	return err
}

// onPlacedShards checks the queue name, places the queue (gives a queue
// not used yet its shard count, so that a control covers the shards its
// jobs will use) and runs op on each of its shards, summing what op
// returns.
func (b *Broker) onPlacedShards(ctx context.Context, queue string, op func(k keyspace.Keys, kk keyCapKeys) (int64, error)) (int64, error) {
	if err := naming.Queue(queue); err != nil {
		return 0, err
	}
	if _, err := b.route.Place(ctx, queue); err != nil {
		return 0, queueErr(queue, err)
	}
	return b.sumShards(ctx, queue, func(_ keyspace.Queue, s keyspace.Shard) (int64, error) {
		k := s.Keys()
		return op(k, keyCapKeysOf(k))
	})
}

// maxKeyWeight is the highest weight SetKeyWeight takes.
const maxKeyWeight = 1000

// SetKeyWeight sets the weight of key in the fair turns between the keys
// of queue (SetKeyFairness): its share of each turn relative to the other
// keys', so that a key of weight 3 starts 3 jobs for each 1 of a key of
// weight 1 while both have due jobs and the claim has room for them. w is
// 1 to 1000; every key's weight is 1 unless set, and setting 1 removes
// the key's own weight. A weight may be set whether the turns are on or
// off, and takes effect while they are on, from the next claim; it
// changes no other control (the key's pause, cap and rate limit still
// apply to the jobs its turns choose).
//
// A claim deals its room out to the keys at the front of the turns in
// proportion to their weights (each key's take is its weight times the
// room over the sum of the weights, at least its weight). A turn that the
// claim's room cuts short goes on in the next claim: the key keeps its
// place at the front with the jobs it took, so claims of a few jobs, one
// at a time even, keep to the weights as well.
//
// It applies on every shard of a sharded queue (a key's jobs are spread
// over the shards, and each shard deals its own turns). Setting the same
// weight again changes nothing, so a call whose reply was lost can be
// sent again. Bad input (a bad queue name, a key that is empty or not a
// valid key, w out of 1 to 1000) is refused with an error wrapping
// job.ErrInvalid, and nothing changes. While some key of a shard has a
// weight, a claim there with the turns on reads the weights of the keys
// it deals to (and the turn a claim cut short) with one HMGET, and writes
// that turn with one HSET or HDEL when one is cut short or ends. See
// docs/flow-control.md#fair-turns-between-keys.
func (b *Broker) SetKeyWeight(ctx context.Context, queue, key string, w int) error {
	if key == "" {
		return fmt.Errorf("broker: %w: key weight: key is empty", job.ErrInvalid)
	}
	if err := naming.Key(key); err != nil {
		return err
	}
	if w < 1 || w > maxKeyWeight {
		return fmt.Errorf("broker: %w: key weight %d of key %q is not 1 to %d", job.ErrInvalid, w, key, maxKeyWeight)
	}
	_, err := b.onPlacedShards(ctx, queue, func(k keyspace.Keys, kk keyCapKeys) (int64, error) {
		_, err := b.run(ctx, keyWeightScript, []string{k.Controls, kk.Weights}, key, w)
		return 0, err
	})
	return err
}

// PauseKey pauses the jobs of one key (job.Key, job.KeyFrom) in queue, as
// Pause pauses a type: from the moment it returns no worker claims a job
// of key (checked inside the claim script). A due job of a paused key is
// held aside exactly as one of a key at its concurrency cap: still
// pending (cancellable, replaceable, counted in job.QueueStats.HeldByKey),
// no attempt spent, no slot of its key or type taken, and the other keys'
// jobs are claimed as usual. Jobs of key already claimed run to their
// end. Pausing a paused key changes nothing. It applies on every shard of
// a sharded queue.
//
// The names follow the controls beside it: Pause and Resume take a type,
// where "" is the whole queue, and SetKeyConcurrency a key, where "" is
// the default of every key; a key's pause is its own method so that
// neither argument means two things. There is no "" here (pausing every
// key is pausing the queue, Pause(ctx, queue, "")): a key that is empty
// or not a valid key (see job.Key), or a bad queue name, is refused
// with an error wrapping job.ErrInvalid, and nothing changes. As with
// Pause, a queue not used yet is placed (given its shard count) so that
// the pause covers the shards its jobs will use.
//
// While a key is paused, a claim reads the key of each due job (a string
// match in its header) and one HMGET of the paused keys per claim call;
// jobs without a key are claimed as before. See
// docs/flow-control.md#pausing-a-key.
func (b *Broker) PauseKey(ctx context.Context, queue, key string) error {
	_, err := b.pauseKey(ctx, queue, key, true)
	return err
}

// ResumeKey ends a pause of key in queue: its held jobs go back to the
// schedule at their ready times (due at once, in order) and the queue's
// workers are woken, so they are claimed within the claim that follows
// the wake-up. ResumeKey returns how many came back (summed over the
// shards; 0 when key was not paused, and nothing moves then). A key that
// has a concurrency cap (its own or the default) is held again by the
// next claims once at its cap: a resume lifts the pause, not the cap.
// Errors as for PauseKey.
func (b *Broker) ResumeKey(ctx context.Context, queue, key string) (int64, error) {
	return b.pauseKey(ctx, queue, key, false)
}

// pauseKey runs keypause.lua on every shard of queue.
func (b *Broker) pauseKey(ctx context.Context, queue, key string, on bool) (int64, error) {
	if key == "" {
		return 0, fmt.Errorf("broker: %w: key is empty (to pause every key, pause the queue)", job.ErrInvalid)
	}
	if err := naming.Key(key); err != nil {
		return 0, err
	}
	return b.onPlacedShards(ctx, queue, func(k keyspace.Keys, kk keyCapKeys) (int64, error) {
		res, err := b.run(ctx, keyPauseScript, []string{k.Controls, kk.Paused, kk.HeldKeys, k.Scheduled, k.Held}, key, flag(on), k.Wake)
		if err != nil {
			return 0, err
		}
		n, ok := res.(int64)
		if !ok {
			return 0, fmt.Errorf("broker: pause key: unexpected reply %v", res)
		}
		return n, nil
	})
}
