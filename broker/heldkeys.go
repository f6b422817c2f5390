package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// maxHeldKeys is the most keys HeldKeys lists in one call.
const maxHeldKeys = admin.MaxHeldKeys

// HeldKey is one key of a queue holding jobs back (HeldKeys).
type HeldKey struct {
	Key string
	// Held: its due jobs held by its concurrency cap, its pause or its
	// rate limit, over every shard.
	Held int64
	// Running: its jobs leased under a key cap (counted from the claim to
	// the end of the lease, as the cap counts them; jobs of a key no cap
	// applies to are not counted, and show 0).
	Running int64
	// Cap is its concurrency cap (SetKeyConcurrency): its own when OwnCap,
	// else the queue's default; 0 for none.
	Cap    int
	OwnCap bool
	// Paused: PauseKey paused it.
	Paused bool
	// Rate is its rate limit (SetKeyRateLimit): its own when OwnRate,
	// else the queue's default; zero for none.
	Rate    job.RateLimit
	OwnRate bool
	// WaitsForToken: some of its held jobs wait for its next token (on a
	// sharded queue, on some shard).
	WaitsForToken bool
	// WaitsForTurn: its held jobs wait for its turn (SetKeyFairness; on a
	// sharded queue, on some shard).
	WaitsForTurn bool
	// Weight is its weight in the fair turns (SetKeyWeight): 1 unless
	// set.
	Weight int
	// Reason says why its jobs wait: "paused" (which wins: a resume
	// still leaves the cap and the rate; a paused key listed with nothing
	// held says it too), else "cap" while its running jobs fill its cap,
	// else "rate" while it waits for a token, else "turn" while it waits
	// for its turn, else "cap".
	Reason string
}

// HeldKeys are the keys of a queue holding the most jobs back (HeldKeys).
type HeldKeys struct {
	// Keys, the most held first (ties by key), then paused keys that hold
	// nothing, up to the n asked for.
	Keys []HeldKey
	// Holding: how many keys hold jobs back (on a sharded queue the most
	// of any shard: at least that many distinct keys).
	Holding int64
	// PausedKeys: how many keys are paused.
	PausedKeys int64
	// DefaultCap is the queue's default key cap (0 for none).
	DefaultCap int
	// DefaultRate is the queue's default key rate limit (zero for none).
	DefaultRate job.RateLimit
}

// HeldKeys lists the n keys of queue holding the most jobs back (held by
// their key's concurrency cap, its rate limit or PauseKey, or waiting for
// their turn under SetKeyFairness), with, per key, its held and running
// jobs, its cap and rate limit (its own or the default), whether it is
// paused, its weight in the fair turns (SetKeyWeight), and why its jobs
// wait. While fewer than n keys hold jobs, paused keys holding nothing
// fill the list.
//
// Its cost is bounded by n, whatever the number of keys: each shard keeps
// the held count of every key holding jobs in a sorted set (ns:{q}:keyheld,
// score = held jobs, written where jobs are held and released), so the top
// n is one ZREVRANGE, O(log K + n) for K keys holding, and each key listed
// costs O(1) (three ZMSCORE entries and five HMGET fields). On a sharded
// queue each shard gives its n first; the union of those is then read on
// every shard and summed, so a key's counts are exact, but a key that is
// in no shard's top n can be missed although its sum would place it in
// the list (its jobs spread evenly over the shards make this rare).
// One script call per shard, two on a sharded queue.
//
// n must be 1 to 1,000; a bad n or queue name is refused with an
// error wrapping job.ErrInvalid. A queue never used lists no keys, as
// Stats reads it empty.
func (b *Broker) HeldKeys(ctx context.Context, queue string, n int) (HeldKeys, error) {
	if n < 1 || n > maxHeldKeys {
		return HeldKeys{}, fmt.Errorf("broker: %w: held keys: n %d is not 1 to %d", job.ErrInvalid, n, maxHeldKeys)
	}
	q, err := b.queue(ctx, queue)
	if err != nil {
		return HeldKeys{}, err
	}
	shards := q.Shards()
	var out HeldKeys
	byKey := map[string]*HeldKey{}
	var order []string
	read := func(s keyspace.Shard, top int, extra []string) ([]string, error) {
		k := s.Keys()
		kk := keyCapKeysOf(k)
		args := make([]any, 0, 1+len(extra))
		args = append(args, top)
		for _, e := range extra {
			args = append(args, e)
		}
		res, err := b.run(ctx, keysScript, []string{k.Controls, kk.HeldKeys, kk.Run, kk.Caps, kk.Paused, kk.Rates, kk.Wait, kk.Turn, kk.Weights}, args...)
		if err != nil {
			return nil, queueErr(queue, err)
		}
		v, ok := res.([]any)
		if !ok || len(v) != 5 {
			return nil, fmt.Errorf("broker: held keys of queue %q: unexpected reply %v", queue, res)
		}
		def, _ := v[0].(string)
		holding, _ := v[1].(int64)
		paused, _ := v[2].(int64)
		rows, _ := v[3].([]any)
		out.DefaultCap = max(out.DefaultCap, capTotal(def))
		if rd, _ := v[4].(string); rd != "" {
			out.DefaultRate, _ = parseRate(rd)
		}
		out.Holding = max(out.Holding, holding)
		out.PausedKeys = max(out.PausedKeys, paused)
		var got []string
		for i := 0; i+8 < len(rows); i += 9 {
			key, _ := rows[i].(string)
			held, _ := rows[i+1].(int64)
			running, _ := rows[i+2].(int64)
			own, _ := rows[i+3].(string)
			p, _ := rows[i+4].(int64)
			ownRate, _ := rows[i+5].(string)
			wait, _ := rows[i+6].(int64)
			turn, _ := rows[i+7].(int64)
			weight, _ := rows[i+8].(int64)
			h := byKey[key]
			if h == nil {
				h = &HeldKey{Key: key}
				byKey[key] = h
				order = append(order, key)
			}
			h.Held += held
			h.Running += running
			if c := capTotal(own); c > 0 {
				h.Cap, h.OwnCap = c, true
			}
			h.Paused = h.Paused || p == 1
			if r, ok := parseRate(ownRate); ok {
				h.Rate, h.OwnRate = r, true
			}
			h.WaitsForToken = h.WaitsForToken || wait >= 0
			h.WaitsForTurn = h.WaitsForTurn || turn == 1
			h.Weight = max(h.Weight, int(weight), 1)
			got = append(got, key)
		}
		return got, nil
	}
	seen := make([][]string, len(shards))
	for i, s := range shards {
		if seen[i], err = read(s, n, nil); err != nil {
			return HeldKeys{}, err
		}
	}
	if len(shards) > 1 {
		for i, s := range shards {
			var missing []string
			for _, key := range order {
				if !slices.Contains(seen[i], key) {
					missing = append(missing, key)
				}
			}
			if len(missing) > 0 {
				if _, err := read(s, 0, missing); err != nil {
					return HeldKeys{}, err
				}
			}
		}
	}
	for _, key := range order {
		h := byKey[key]
		if !h.OwnCap {
			h.Cap = out.DefaultCap
		}
		if !h.OwnRate {
			h.Rate = out.DefaultRate
		}
		switch {
		case h.Paused:
			h.Reason = "paused"
		case h.Held > 0 && h.Cap > 0 && h.Running >= int64(h.Cap):
			h.Reason = "cap"
		case h.Held > 0 && h.WaitsForToken:
			h.Reason = "rate"
		case h.Held > 0 && h.WaitsForTurn:
			h.Reason = "turn"
		case h.Held > 0:
			h.Reason = "cap"
		}
		out.Keys = append(out.Keys, *h)
	}
	slices.SortStableFunc(out.Keys, func(a, b HeldKey) int {
		if c := cmp.Compare(b.Held, a.Held); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(out.Keys) > n {
		out.Keys = out.Keys[:n]
	}
	return out, nil
}

// capTotal is the whole cap of a stored "share/total", 0 for none.
func capTotal(v string) int {
	_, total, ok := strings.Cut(v, "/")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(total)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
