package broker

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/job"
)

// StatsOf reads the stats of several queues in one pipelined round trip (two
// when the server has not cached the script yet), in the order given. Each
// queue costs the one O(log N) script call of Stats. It returns an error
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
	now := b.nowArg()
	for attempt := 0; ; attempt++ {
		p := b.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(queues))
		for i, q := range queues {
			k := b.keys(q)
			cmds[i] = statsScript.EvalSha(ctx, p, []string{k.scheduled, k.processing, k.deadIndex}, now)
		}
		_, _ = p.Exec(ctx)
		out := make([]QueueStats, len(queues))
		reload := false
		for i, c := range cmds {
			res, err := c.Result()
			if err != nil {
				if redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
					reload = true
					break
				}
				return nil, queueErr(queues[i], err)
			}
			if out[i], err = parseStats(queues[i], res); err != nil {
				return nil, err
			}
		}
		if !reload {
			return out, nil
		}
		if err := statsScript.Load(ctx, b.rdb).Err(); err != nil {
			return nil, fmt.Errorf("broker: load stats script: %w", err)
		}
	}
}

// parseStats decodes the reply of stats.lua.
func parseStats(queue string, res any) (QueueStats, error) {
	v, err := int64s(res, 7)
	if err != nil {
		return QueueStats{}, err
	}
	s := QueueStats{Queue: queue, Now: fromMS(v[0]), Scheduled: v[1], Due: v[2], Processing: v[3], Dead: v[4]}
	if v[5] >= 0 {
		s.OldestDue = fromMS(v[5])
	}
	if v[6] >= 0 {
		s.NextReady = fromMS(v[6])
	}
	return s, nil
}
