package dashboard

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
)

// memorySamples is the SAMPLES argument of the MEMORY USAGE calls: the
// elements of a hash, set or sorted set the server measures to estimate
// the whole key, so a key of a million jobs costs what one of five does.
const memorySamples = 5

// serverMemory is what INFO memory says of the server (the sum over the
// masters of a cluster), or why it cannot be read.
type serverMemory struct {
	Used, Max int64 // bytes; Max 0: no maxmemory
	Policy    string
	Nodes     int    // servers summed
	Err       string // "" when read
}

// readServerMemory reads INFO memory. A server that refuses it (an ACL user
// without INFO, a managed Redis that hides it) gives Err, not an error: the
// page shows "not available".
func readServerMemory(ctx context.Context, rdb redis.UniversalClient) serverMemory {
	var (
		m  serverMemory
		mu sync.Mutex
	)
	read := func(ctx context.Context, c *redis.Client) error {
		raw, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		f := infoFields(raw)
		used, err := strconv.ParseInt(f["used_memory"], 10, 64)
		if err != nil {
			return errors.New("INFO memory has no used_memory")
		}
		max, _ := strconv.ParseInt(f["maxmemory"], 10, 64)
		mu.Lock()
		defer mu.Unlock()
		m.Used += used
		m.Max += max
		m.Nodes++
		if m.Policy == "" {
			m.Policy = f["maxmemory_policy"]
		}
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		err = errors.New("not a single server or a cluster client")
	}
	if err != nil {
		return serverMemory{Err: notAvailable(err)}
	}
	return m
}

// infoFields parses the "name:value" lines of an INFO answer.
func infoFields(raw string) map[string]string {
	f := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			f[k] = v
		}
	}
	return f
}

// notAvailable says why a read of the server's memory failed, in one line.
func notAvailable(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if strings.HasPrefix(s, "NOPERM") {
		return "not available: this Redis user may not run it (" + firstLine(s, 120) + ")"
	}
	return "not available: " + firstLine(s, 160)
}

// queueMemory is what the keys of one queue take in Redis, estimated by
// MEMORY USAGE with a bounded sample, or why it cannot be read.
type queueMemory struct {
	Bytes int64
	Keys  int    // keys that exist, of those measured
	Err   string // "" when read
}

// fixedCount is a keyspace.Counts that knows one queue's shard count, to
// resolve the queue's keys without another read.
type fixedCount int

func (n fixedCount) Count(context.Context, string) (int, bool, error) { return int(n), true, nil }
func (fixedCount) Store(context.Context, string, int) (int, error) {
	return 0, errors.New("dashboard: a memory read stores no shard count")
}
func (fixedCount) Occupied(context.Context, keyspace.Shard) (bool, error) { return false, nil }

// readQueueMemory estimates the memory of queue q: its jobs, schedule,
// leases, dead letters, controls and the held jobs of the types s names a
// cap or rate limit for, over every shard; one MEMORY USAGE … SAMPLES 5 a
// key, pipelined, so the cost is a few dozen calls whatever the queue
// holds. Not counted: results kept by job.Retain (one key a job) and the
// per-minute history (which expires by itself).
func (d *Dashboard) readQueueMemory(ctx context.Context, q string, s broker.QueueStats) queueMemory {
	shards, err := d.b.Shards(ctx, q)
	if err != nil {
		return queueMemory{Err: notAvailable(err)}
	}
	kq, err := keyspace.NewRouter(d.b.Namespace(), fixedCount(len(shards))).Queue(ctx, q)
	if err != nil {
		return queueMemory{Err: notAvailable(err)}
	}
	types := map[string]bool{}
	for t := range s.Caps {
		types[t] = true
	}
	for t := range s.RateLimits {
		types[t] = true
	}
	var keys []string
	for _, sh := range kq.Shards() {
		k := sh.Keys()
		keys = append(keys, k.JobKeys()...)
		for t := range types {
			if t != "" {
				keys = append(keys, k.Held+t)
			}
		}
	}
	rdb := d.b.Client()
	cmds := make([]*redis.IntCmd, len(keys))
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.MemoryUsage(ctx, k, memorySamples)
		}
		return nil
	})
	var m queueMemory
	for _, c := range cmds {
		n, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return queueMemory{Err: notAvailable(err)}
		default:
			m.Bytes += n
			m.Keys++
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return queueMemory{Err: notAvailable(err)}
	}
	return m
}

// formatBytes is n bytes in binary units: 512 B, 1.5 KiB, 12.3 MiB, 2.0 GiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTP"[exp]) + "iB"
}
