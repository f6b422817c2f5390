package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// QueueStats is the state of one queue at one instant of the server's clock.
type QueueStats = job.QueueStats

// Stats reads the counts of one queue in one script call (one per shard of
// a sharded queue, pipelined, summed).
func (b *Broker) Stats(ctx context.Context, queue string) (QueueStats, error) {
	out, err := b.StatsOf(ctx, queue)
	if err != nil {
		return QueueStats{}, err
	}
	return out[0], nil
}

// StatsOf reads the stats of several queues in one pipelined round trip (two
// when the server has not cached the script yet), in the order given. Each
// shard costs the one O(log N) script call of stats.lua. It returns an error
// wrapping job.ErrInvalid for a bad queue name, before contacting Redis.
func (b *Broker) StatsOf(ctx context.Context, queues ...string) ([]QueueStats, error) {
	for _, q := range queues {
		if err := job.ValidateQueue(q); err != nil {
			return nil, err
		}
	}
	if len(queues) == 0 {
		return nil, nil
	}
	resolved := make([]keyspace.Queue, len(queues))
	var calls []read
	for i, name := range queues {
		q, err := b.queue(ctx, name)
		if err != nil {
			return nil, err
		}
		resolved[i] = q
		for _, s := range q.Shards() {
			k := s.Keys()
			calls = append(calls, read{s: statsScript, keys: []string{k.Scheduled, k.Processing, k.DeadIndex, k.Counts, k.Controls, k.Parked, k.Held}})
		}
	}
	res, errs := b.runReads(ctx, calls)
	out := make([]QueueStats, len(queues))
	c := 0
	for i, q := range resolved {
		out[i].Queue = q.Name()
		for j := range q.Shards() {
			if errs[c] != nil {
				return nil, queueErr(q.Name(), errs[c])
			}
			st, err := parseStats(res[c])
			if err != nil {
				return nil, queueErr(q.Name(), err)
			}
			merge(&out[i], st, j == 0)
			c++
		}
	}
	return out, nil
}

// parseStats decodes the reply of stats.lua.
func parseStats(res any) (QueueStats, error) {
	parts, ok := res.([]any)
	if !ok || len(parts) != 14 {
		return QueueStats{}, fmt.Errorf("broker: stats: unexpected reply %v", res)
	}
	v, err := int64s(parts[:10], 10)
	if err != nil {
		return QueueStats{}, err
	}
	types, err := strs(parts[10])
	if err != nil {
		return QueueStats{}, err
	}
	slices.Sort(types)
	rates, err := strs(parts[11])
	if err != nil {
		return QueueStats{}, err
	}
	var limits map[string]RateLimit
	for i := 0; i+1 < len(rates); i += 2 {
		var r RateLimit
		var perMS int64
		var shards int
		if _, err := fmt.Sscanf(rates[i+1], "%d/%d/%d/%d", &r.Count, &perMS, &r.Burst, &shards); err != nil {
			continue
		}
		r.Per = time.Duration(perMS) * time.Millisecond
		if limits == nil {
			limits = make(map[string]RateLimit)
		}
		limits[rates[i]] = r
	}
	capList, err := strs(parts[12])
	if err != nil {
		return QueueStats{}, err
	}
	var caps map[string]int
	for i := 0; i+1 < len(capList); i += 2 {
		var share, total int
		if _, err := fmt.Sscanf(capList[i+1], "%d/%d", &share, &total); err != nil {
			continue
		}
		if caps == nil {
			caps = make(map[string]int)
		}
		caps[capList[i]] = total
	}
	held, _ := parts[13].(int64)
	s := QueueStats{Now: fromMS(v[0]), Scheduled: v[1], Due: v[2], Processing: v[3], Dead: v[4], ExpiredDropped: v[7],
		Paused: v[8] == 1, Parked: v[9], PausedTypes: types, RateLimits: limits, Caps: caps, Held: held}
	if v[5] >= 0 {
		s.OldestDue = fromMS(v[5])
	}
	if v[6] >= 0 {
		s.NextReady = fromMS(v[6])
	}
	return s, nil
}

// merge adds the stats of one shard to those of its queue. The first
// shard's clock is the queue's; OldestDue and NextReady of the others are
// moved from their shard's clock to it, and the extremes kept.
func merge(into *QueueStats, st QueueStats, first bool) {
	if first {
		into.Now = st.Now
	}
	into.Scheduled += st.Scheduled
	into.Due += st.Due
	into.Processing += st.Processing
	into.Dead += st.Dead
	into.ExpiredDropped += st.ExpiredDropped
	into.Parked += st.Parked
	into.Held += st.Held
	for t, n := range st.Caps {
		if into.Caps == nil {
			into.Caps = make(map[string]int)
		}
		into.Caps[t] = n
	}
	for t, r := range st.RateLimits {
		if into.RateLimits == nil {
			into.RateLimits = make(map[string]RateLimit)
		}
		into.RateLimits[t] = r
	}
	into.Paused = into.Paused || st.Paused
	for _, t := range st.PausedTypes {
		if !slices.Contains(into.PausedTypes, t) {
			into.PausedTypes = append(into.PausedTypes, t)
		}
	}
	earliest := func(have, t time.Time) time.Time {
		if t.IsZero() {
			return have
		}
		t = into.Now.Add(t.Sub(st.Now))
		if have.IsZero() || t.Before(have) {
			return t
		}
		return have
	}
	into.OldestDue = earliest(into.OldestDue, st.OldestDue)
	into.NextReady = earliest(into.NextReady, st.NextReady)
}
