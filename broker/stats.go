package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// Stats reads the stats of the queues named, in one pipelined round trip
// (two when the server has not cached the script yet), in the order given;
// with no queue named, of every known queue that delayq could have
// written, sorted by name (an empty list reads every queue too: a caller
// that pages through names skips the call for an empty page). Each shard
// costs the one O(log N) script call of stats.lua; a sharded queue's
// shards are summed. A queue that cannot be read (its shard count in
// ns:shards is not a number, one of its keys holds the wrong type, the
// connection failed for it, ...) does not hide the others: it is left out
// of the slice, and a *QueueErrors naming it and why comes with the
// others' stats (it unwraps to each queue's error, so errors.Is sees
// them). It returns an error wrapping job.ErrInvalid for a bad queue name,
// before contacting Redis; any other error comes with no stats. For one
// queue, read element 0 when the error is nil.
func (b *Broker) Stats(ctx context.Context, queues ...string) ([]job.QueueStats, error) {
	if len(queues) == 0 {
		names, err := b.queueNames(ctx)
		if err != nil {
			return nil, err
		}
		slices.Sort(names)
		queues = slices.DeleteFunc(names, func(q string) bool { return naming.Queue(q) != nil }) // others were not written by delayq
		if len(queues) == 0 {
			return []job.QueueStats{}, nil
		}
	}
	all, errs, err := b.statsOf(ctx, queues)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]job.QueueStats, 0, len(all))
	var bad *QueueErrors
	for i, st := range all {
		if errs[i] == nil {
			out = append(out, st)
			continue
		}
		if bad == nil {
			bad = &QueueErrors{Errs: map[string]error{}}
		}
		bad.Errs[queues[i]] = errs[i]
	}
	if bad == nil {
		return out, nil
	}
	return out, bad
}

// statsOf reads the stats of queues: out and errs are aligned with them,
// errs[i] set when queue i could not be read (its shard count, a key of the
// wrong type, the connection); err is for the call as a whole (a bad queue
// name).
func (b *Broker) statsOf(ctx context.Context, queues []string) (out []job.QueueStats, errs []error, err error) {
	for _, q := range queues {
		if err := naming.Queue(q); err != nil {
			return nil, nil, err
		}
	}
	if len(queues) == 0 {
		return nil, nil, nil
	}
	out, errs = make([]job.QueueStats, len(queues)), make([]error, len(queues))
	resolved := make([]keyspace.Queue, len(queues))
	var calls []read
	for i, name := range queues {
		q, err := b.queue(ctx, name)
		if err != nil {
			errs[i] = err
			continue
		}
		resolved[i] = q
		for _, s := range q.Shards() {
			k := s.Keys()
			calls = append(calls, read{s: statsScript, keys: []string{k.Scheduled, k.Processing, k.DeadIndex, k.Counts, k.Controls, k.Parked, k.Held, keyCapKeysOf(k).HeldKeys, keyCapKeysOf(k).ParkedTypes}})
		}
	}
	res, rerrs := b.runReads(ctx, calls)
	c := 0
	for i, q := range resolved {
		if errs[i] != nil {
			continue
		}
		out[i].Queue = q.Name()
		for j := range q.Shards() {
			err := rerrs[c]
			var st job.QueueStats
			if err == nil {
				st, err = parseStats(res[c])
			}
			c++
			if err != nil {
				if errs[i] == nil {
					errs[i] = queueErr(q.Name(), err)
				}
				continue
			}
			merge(&out[i], st, j == 0)
		}
	}
	return out, errs, nil
}

// QueueErrors is the error of a reader of several queues (Stats) that
// could not read some of them: the others were read and are returned with
// it. Errs maps each unreadable queue to why (a shard count that is not a
// number, a key of the wrong type, ...), with the key or record named.
type QueueErrors struct {
	Errs map[string]error
}

func (e *QueueErrors) Error() string {
	names := slices.Sorted(maps.Keys(e.Errs))
	var b strings.Builder
	fmt.Fprintf(&b, "broker: %d queue(s) could not be read", len(names))
	for _, q := range names {
		fmt.Fprintf(&b, "; %v", e.Errs[q])
	}
	return b.String()
}

// Unwrap returns the errors of the queues, in the order of their names.
func (e *QueueErrors) Unwrap() []error {
	names := slices.Sorted(maps.Keys(e.Errs))
	out := make([]error, len(names))
	for i, q := range names {
		out[i] = e.Errs[q]
	}
	return out
}

// parseStats decodes the reply of stats.lua.
func parseStats(res any) (job.QueueStats, error) {
	parts, ok := res.([]any)
	if !ok || len(parts) != 20 {
		return job.QueueStats{}, fmt.Errorf("broker: stats: unexpected reply %v", res)
	}
	v, err := int64s(parts[:10], 10)
	if err != nil {
		return job.QueueStats{}, err
	}
	types, err := strs(parts[10])
	if err != nil {
		return job.QueueStats{}, err
	}
	slices.Sort(types)
	rates, err := strs(parts[11])
	if err != nil {
		return job.QueueStats{}, err
	}
	var limits map[string]job.RateLimit
	for i := 0; i+1 < len(rates); i += 2 {
		r, ok := parseRate(rates[i+1])
		if !ok {
			continue
		}
		if limits == nil {
			limits = make(map[string]job.RateLimit)
		}
		limits[rates[i]] = r
	}
	capList, err := strs(parts[12])
	if err != nil {
		return job.QueueStats{}, err
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
	heldByRate := typeCounts(parts[14])
	heldByCap := typeCounts(parts[16])
	heldByKey, _ := parts[17].(int64)
	parkedByType := typeCounts(parts[18])
	fair, _ := parts[19].(int64)
	trims, err := int64s(parts[15], 3)
	if err != nil {
		return job.QueueStats{}, err
	}
	s := job.QueueStats{DeadTrimmedCap: trims[0], DeadTrimmedAge: trims[1], DeadTrimmedUnarchived: trims[2], Now: fromMS(v[0]), Scheduled: v[1], Due: v[2], Processing: v[3], Dead: v[4], ExpiredDropped: v[7],
		Paused: v[8] == 1, Parked: v[9], PausedTypes: types, RateLimits: limits, Caps: caps, Held: held, HeldByRate: heldByRate, HeldByCap: heldByCap, HeldByKey: heldByKey, ParkedByType: parkedByType, FairKeys: fair == 1}
	if v[5] >= 0 {
		s.OldestDue = fromMS(v[5])
	}
	if v[6] >= 0 {
		s.NextReady = fromMS(v[6])
	}
	return s, nil
}

// typeCounts decodes a {type, count, ...} reply of stats.lua; nil when
// empty.
func typeCounts(reply any) map[string]int64 {
	list, _ := reply.([]any)
	var out map[string]int64
	for i := 0; i+1 < len(list); i += 2 {
		t, _ := list[i].(string)
		c, _ := list[i+1].(int64)
		if out == nil {
			out = make(map[string]int64)
		}
		out[t] += c
	}
	return out
}

// parseRate decodes a rate limit as SetRateLimit stores it:
// "count/per ms/burst/shards", then "/s/<share>/<slack ms>" for a strict
// window.
func parseRate(v string) (job.RateLimit, bool) {
	var r job.RateLimit
	var perMS, shards, share, slackMS int64
	var rest string
	n, _ := fmt.Sscanf(v, "%d/%d/%d/%d%s", &r.Count, &perMS, &r.Burst, &shards, &rest)
	if n < 4 {
		return job.RateLimit{}, false
	}
	r.Per = time.Duration(perMS) * time.Millisecond
	if rest != "" {
		if _, err := fmt.Sscanf(rest, "/s/%d/%d", &share, &slackMS); err != nil {
			return job.RateLimit{}, false
		}
		r.Strict, r.Slack, r.Burst = true, time.Duration(slackMS)*time.Millisecond, 0
	}
	return r, true
}

// merge adds the stats of one shard to those of its queue. The first
// shard's clock is the queue's; OldestDue and NextReady of the others are
// moved from their shard's clock to it, and the extremes kept.
func merge(into *job.QueueStats, st job.QueueStats, first bool) {
	if first {
		into.Now = st.Now
	}
	into.Scheduled += st.Scheduled
	into.Due += st.Due
	into.Processing += st.Processing
	into.Dead += st.Dead
	into.ExpiredDropped += st.ExpiredDropped
	into.DeadTrimmedCap += st.DeadTrimmedCap
	into.DeadTrimmedAge += st.DeadTrimmedAge
	into.DeadTrimmedUnarchived += st.DeadTrimmedUnarchived
	into.Parked += st.Parked
	for t, n := range st.ParkedByType {
		if into.ParkedByType == nil {
			into.ParkedByType = make(map[string]int64)
		}
		into.ParkedByType[t] += n
	}
	into.Held += st.Held
	for t, n := range st.HeldByRate {
		if into.HeldByRate == nil {
			into.HeldByRate = make(map[string]int64)
		}
		into.HeldByRate[t] += n
	}
	into.HeldByKey += st.HeldByKey
	for t, n := range st.HeldByCap {
		if into.HeldByCap == nil {
			into.HeldByCap = make(map[string]int64)
		}
		into.HeldByCap[t] += n
	}
	for t, n := range st.Caps {
		if into.Caps == nil {
			into.Caps = make(map[string]int)
		}
		into.Caps[t] = n
	}
	for t, r := range st.RateLimits {
		if into.RateLimits == nil {
			into.RateLimits = make(map[string]job.RateLimit)
		}
		into.RateLimits[t] = r
	}
	into.Paused = into.Paused || st.Paused
	into.FairKeys = into.FairKeys || st.FairKeys
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

// wrongType names key in err when Redis refused a read of it as being of
// the wrong type (a bare "WRONGTYPE Operation against a key holding the
// wrong kind of value"), as the scripts' own check does (expect in
// prelude.lua); want is the type delayq keeps there. Other errors are
// returned as they are.
func (b *Broker) wrongType(ctx context.Context, key, want string, err error) error {
	if !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return err
	}
	have, terr := b.rdb.Type(ctx, key).Result()
	if terr != nil {
		return err
	}
	return fmt.Errorf("WRONGTYPE delayq: key %s holds a %s, not a %s; nothing was changed", key, have, want)
}
