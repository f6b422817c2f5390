package broker

import (
	"context"
	"strings"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// keyCapKeys are the keys of the per-key caps of one shard, beside its
// other keys (same hash tag). A key's held jobs are in the shard's held
// prefix .. "#" .. key ('#' is in no type name, so no type's held set has
// that name).
type keyCapKeys struct {
	Run      string // HASH key -> jobs of the key leased under its cap
	Caps     string // HASH key -> "share/total": the keys' own caps
	HeldKeys string // SET of the keys with jobs held by their cap
}

func keyCapKeysOf(k keyspace.Keys) keyCapKeys {
	p := strings.TrimSuffix(k.Held, "held:")
	return keyCapKeys{Run: p + "keyrun", Caps: p + "keycaps", HeldKeys: p + "keyheld"}
}

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
		if err := job.ValidateKey(key); err != nil {
			return err
		}
	}
	if err := job.ValidateQueue(queue); err != nil {
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
