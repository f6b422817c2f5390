package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// The per-minute history of a queue is kept by the scripts that move jobs,
// in the round trip they make anyway: claim counts the jobs it hands out and
// their lateness, ack the jobs done, retry the failed attempts and kill the
// dead jobs. Each minute of the server's clock that saw any of these has one
// small hash, ns:{q}:hist:<minute> (minute = ms since the epoch / 60,000),
// that expires historyRetention after its last write.

// historyRetention is how long a minute of history is kept after its last
// write.
const historyRetention = 24 * time.Hour

// maxHistoryMinutes is the most minutes one History call reads per queue.
const maxHistoryMinutes = 24*60 + 1

// The fields of a history hash.
var historyFields = []string{"claimed", "late_sum", "late_max", "done", "failed", "dead", "rate_held"}

// historyChunk bounds the commands of one pipeline.
const historyChunk = 5000

// History returns the history of each queue for every minute from the one
// that holds from to the one that holds to, both included: out[i][j] is
// queue i's minute j, with zero counts for minutes nothing happened in (or
// that expired). It reads one small hash per queue and minute, pipelined;
// no scan. A key that is not such a hash counts as an empty minute. It returns an error wrapping job.ErrInvalid for a bad queue name,
// to before from, or a span over maxHistoryMinutes.
func (b *Broker) history(ctx context.Context, queues []string, from, to time.Time) ([][]admin.Minute, error) {
	for _, q := range queues {
		if err := naming.Queue(q); err != nil {
			return nil, err
		}
	}
	first, last := ms(from)/60_000, ms(to)/60_000
	switch n := last - first + 1; {
	case n <= 0:
		return nil, fmt.Errorf("broker: %w: history from %s to %s: the end is before the start", job.ErrInvalid, from, to)
	case n > maxHistoryMinutes:
		return nil, fmt.Errorf("broker: %w: history of %d minutes; at most %d", job.ErrInvalid, n, maxHistoryMinutes)
	}
	minutes := int(last - first + 1)
	out := make([][]admin.Minute, len(queues))
	type slot struct{ q, m int }
	var (
		slots []slot
		cmds  []*redis.SliceCmd
	)
	flush := func(p redis.Pipeliner) error {
		if len(cmds) == 0 {
			return nil
		}
		_, _ = p.Exec(ctx) // errors are read per command
		for i, c := range cmds {
			vals, err := c.Result()
			var reply redis.Error
			switch {
			case errors.As(err, &reply):
				continue // not a hash (written by something else): counts as empty
			case err != nil:
				return queueErr(queues[slots[i].q], err)
			}
			addMinute(&out[slots[i].q][slots[i].m], vals)
		}
		slots, cmds = slots[:0], cmds[:0]
		return nil
	}
	p := b.rdb.Pipeline()
	for qi, name := range queues {
		q, err := b.queue(ctx, name)
		if err != nil {
			return nil, err
		}
		out[qi] = make([]admin.Minute, minutes)
		for mi := range minutes {
			out[qi][mi].Start = fromMS((first + int64(mi)) * 60_000)
		}
		// A sharded queue's minute is the sum of its shards' minutes.
		for _, s := range q.Shards() {
			prefix := s.Keys().Hist
			for mi := range minutes {
				cmds = append(cmds, p.HMGet(ctx, prefix+strconv.FormatInt(first+int64(mi), 10), historyFields...))
				slots = append(slots, slot{qi, mi})
				if len(cmds) == historyChunk {
					if err := flush(p); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	if err := flush(p); err != nil {
		return nil, err
	}
	return out, nil
}

// addMinute adds the counts of HMGET values in historyFields order to m:
// sums, and the largest lateness. Missing or malformed fields count as 0.
func addMinute(m *admin.Minute, vals []any) {
	n := func(i int) int64 {
		if i >= len(vals) {
			return 0
		}
		s, _ := vals[i].(string)
		v, _ := strconv.ParseInt(s, 10, 64)
		return v
	}
	m.Claimed += n(0)
	m.LatenessSum += time.Duration(n(1)) * time.Millisecond
	m.LatenessMax = max(m.LatenessMax, time.Duration(n(2))*time.Millisecond)
	m.Done += n(3)
	m.Failed += n(4)
	m.Dead += n(5)
	m.RateHeld += n(6)
}
