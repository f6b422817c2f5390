package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// Pause pauses queue, or with a type name only that type's jobs in it (as
// SetRateLimit and SetConcurrency, "" means the whole queue).
//
// A paused queue: from the moment Pause returns no worker claims a job of
// it (checked inside the claim script, so a paused job is never leased)
// until Resume. Jobs go on being enqueued, retried and cancelled; running
// jobs run to their end. Workers that find the queue paused sleep until the
// resume's wake-up notice (at most their MaxIdle). Stats report it
// (job.QueueStats.Paused).
//
// A paused type: a claim that finds one of its jobs due sets it aside
// (parked: still pending, cancellable, counted in job.QueueStats.Parked)
// instead of leasing it, and claims the other types' jobs as usual. The
// type name is checked (letters, digits and "._-:/").
//
// Pausing what is paused changes nothing. One script call per shard.
func (b *Broker) Pause(ctx context.Context, queue, typ string) error {
	what, err := pauseTarget(typ)
	if err != nil {
		return err
	}
	_, err = b.pause(ctx, queue, what, true)
	return err
}

// Resume ends a pause of queue, or with a type name of that type in queue
// ("" for the whole queue), and wakes the queue's workers. A resumed type's
// parked jobs go back to the schedule at their ready times (due at once):
// Resume returns how many came back (0 for a queue, whose jobs were never
// moved), at a cost of O(P) for the P parked jobs of the queue. Resuming
// what is not paused changes nothing.
func (b *Broker) Resume(ctx context.Context, queue, typ string) (int64, error) {
	what, err := pauseTarget(typ)
	if err != nil {
		return 0, err
	}
	return b.pause(ctx, queue, what, false)
}

// pauseTarget is what pause.lua pauses: "*" for the queue, else the type,
// checked.
func pauseTarget(typ string) (string, error) {
	if typ == "" {
		return "*", nil
	}
	if err := naming.Type(typ); err != nil {
		return "", err
	}
	return typ, nil
}

// pause runs pause.lua on every shard of queue; what is "*" or a type.
func (b *Broker) pause(ctx context.Context, queue, what string, on bool) (int64, error) {
	if err := naming.Queue(queue); err != nil {
		return 0, err
	}
	// A queue paused before its first job gets its shard count now, so
	// that the pause covers the shards its jobs will use.
	if _, err := b.route.Place(ctx, queue); err != nil {
		return 0, queueErr(queue, err)
	}
	return b.sumShards(ctx, queue, func(_ keyspace.Queue, s keyspace.Shard) (int64, error) {
		k := s.Keys()
		res, err := b.run(ctx, pauseScript, []string{k.Controls, k.Parked, k.Scheduled, k.Jobs, keyCapKeysOf(k).ParkedTypes}, what, flag(on), k.Wake)
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

// SetRateLimit limits how many jobs of queue start per r.Per across all
// workers: of the whole queue when typ is "", else of the jobs of type typ.
// r.Burst jobs may start at once after a quiet spell (0 means 1). A zero
// r.Count clears the limit. It is enforced in the claim script (GCRA), so
// a job over the limit is not claimed and spends no attempt: a queue over
// its limit claims nothing until its next token, and its workers sleep
// until then; a due job of a limited type without a token is held aside
// with its ready time (still due, in order, shown in job.QueueStats.HeldByRate)
// and starts at one of its type's next tokens, earliest first. A sharded
// queue's rate is split evenly among its shards.
//
// With r.Strict the limit is a sliding window: never more than r.Count
// claims in any window of r.Per + r.Slack (a sharded queue's shard i gets
// Count/S of them, the first Count mod S one more, so Count must be at
// least the shard count).
//
// A change (set, raised, lowered, cleared) takes effect at once for the
// jobs already waiting: the bucket is brought within the new limit, a
// cleared type limit sends its held jobs back to the schedule, and the
// queue's workers are woken. Bad input (a negative count, burst or slack,
// a period under 1 ms, Slack without Strict, Strict with a burst, a bad
// type name) is refused with an error wrapping job.ErrInvalid, and nothing
// changes.
func (b *Broker) SetRateLimit(ctx context.Context, queue, typ string, r job.RateLimit) error {
	what := "*"
	if typ != "" {
		if err := naming.Type(typ); err != nil {
			return err
		}
		what = typ
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
		if _, err := b.run(ctx, limitScript, []string{k.Controls, k.Rate, k.Scheduled, k.Held, k.Window}, what, values[i], k.Wake); err != nil {
			return queueErr(queue, err)
		}
	}
	return nil
}

// rateShares is what each of a queue's shards stores of rate limit r
// ("" each when r.Count is 0: cleared): "count/per ms/burst/shards", each
// shard taking count per (per x shards); a strict window adds
// "/s/<share>/<slack ms>", shard i's share being Count/S, the first
// Count mod S one more, so a strict Count must be at least S.
func rateShares(queue string, r job.RateLimit, shards int) ([]string, error) {
	if r.Count > 0 && r.Strict && r.Count < shards {
		return nil, fmt.Errorf("broker: %w: strict rate limit %d of queue %q is below its %d shards (each shard needs a share)", job.ErrInvalid, r.Count, queue, shards)
	}
	values := make([]string, shards)
	for i := range values {
		if r.Count == 0 {
			continue
		}
		values[i] = fmt.Sprintf("%d/%d/%d/%d", r.Count, ceilMS(r.Per), max(r.Burst, 1), shards)
		if r.Strict {
			share := r.Count / shards
			if i < r.Count%shards {
				share++
			}
			values[i] += fmt.Sprintf("/s/%d/%d", share, ceilMS(r.Slack))
		}
	}
	return values, nil
}

func ceilMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// SetConcurrency caps how many jobs of queue run at once across all
// workers: of the whole queue when typ is "", else of the jobs of type typ.
// A job counts from its claim until its lease ends (acknowledged, retried,
// dead-lettered, released, snoozed, or run out: a crashed worker's jobs
// stop counting when their lease expires). It is enforced in the claim
// script: a queue at its cap claims nothing, and a due job of a type at
// its cap is held aside (no attempt spent, other types still claimed)
// until a job of its type ends; the worker that ends one wakes the
// queue's other workers. n = 0 clears the cap, and held jobs go back to
// the schedule. A sharded queue's cap is split among its shards (shard i
// gets n/S, the first n mod S one more), so n must be at least the number
// of shards. A type's cap counts the jobs claimed since it was set. Bad
// input (a negative n, n below the shard count, a bad queue or type name)
// is refused with an error wrapping job.ErrInvalid, and nothing changes.
func (b *Broker) SetConcurrency(ctx context.Context, queue, typ string, n int) error {
	what := "*"
	if typ != "" {
		if err := naming.Type(typ); err != nil {
			return err
		}
		what = typ
	}
	if err := naming.Queue(queue); err != nil {
		return err
	}
	shards, values, err := b.capShares(ctx, queue, "concurrency cap", n)
	if err != nil {
		return err
	}
	for i, s := range shards {
		value := values[i]
		k := s.Keys()
		if _, err := b.run(ctx, capScript, []string{k.Controls, k.Scheduled, k.Held}, what, value, k.Wake); err != nil {
			return queueErr(queue, err)
		}
	}
	return nil
}

// capShares places queue and splits a cap of n (what it is, for the
// errors) between its shards: each shard's stored value, "share/n", the
// first n mod S shards one more; "" for each when n is 0 (cleared). n must
// not be negative, nor below the shard count.
func (b *Broker) capShares(ctx context.Context, queue, what string, n int) ([]keyspace.Shard, []string, error) {
	if n < 0 {
		return nil, nil, fmt.Errorf("broker: %w: %s %d is negative", job.ErrInvalid, what, n)
	}
	q, err := b.route.Place(ctx, queue)
	if err != nil {
		return nil, nil, queueErr(queue, err)
	}
	shards := q.Shards()
	if n > 0 && n < len(shards) {
		return nil, nil, fmt.Errorf("broker: %w: %s %d of queue %q is below its %d shards (each shard needs a slot)", job.ErrInvalid, what, n, queue, len(shards))
	}
	values := make([]string, len(shards))
	for i := range shards {
		if n > 0 {
			share := n / len(shards)
			if i < n%len(shards) {
				share++
			}
			values[i] = fmt.Sprintf("%d/%d", share, n)
		}
	}
	return shards, values, nil
}
