package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/job"
)

// memorySamples is the SAMPLES argument of QueueMemory's MEMORY USAGE
// calls: the elements of a hash, set or sorted set the server measures to
// estimate the whole key, so a key of a million jobs costs what one of five
// does.
const memorySamples = 5

// queueMemory estimates what the queue st describes (st as Stats returned
// it) takes in Redis: its jobs, schedule, leases, dead letters, remembered
// unique ids, controls, and the held jobs of the types st names a cap or a
// rate limit for, and the per-key caps' counts, caps and list of keys
// holding jobs (not the held sets of each key, one a key), over every
// shard. One MEMORY USAGE … SAMPLES
// memorySamples a key, pipelined: a few dozen calls whatever the queue
// holds. Not counted: results kept by job.Retain (one key a job) and the
// per-minute history (which expires by itself). A server that refuses
// MEMORY USAGE gives an error wrapping admin.ErrMemoryNotReadable.
func (b *Broker) queueMemory(ctx context.Context, st job.QueueStats) (admin.QueueMemory, error) {
	q, err := b.queue(ctx, st.Queue)
	if err != nil {
		return admin.QueueMemory{}, err
	}
	var keys []string
	for _, sh := range q.Shards() {
		k := sh.Keys()
		kk := keyCapKeysOf(k)
		keys = append(keys, k.JobKeys()...)
		keys = append(keys, kk.Run, kk.Caps, kk.HeldKeys, kk.Paused, kk.ParkedTypes, kk.Rates, kk.Wait, kk.Turn, kk.Weights)
		for t := range st.Caps {
			if t != "" {
				keys = append(keys, k.Held+t)
			}
		}
		for t := range st.RateLimits {
			if _, capped := st.Caps[t]; t != "" && t != "*" && !capped {
				keys = append(keys, k.Held+t)
			}
		}
	}
	cmds := make([]*redis.IntCmd, len(keys))
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.MemoryUsage(ctx, k, memorySamples)
		}
		return nil
	})
	var m admin.QueueMemory
	for _, c := range cmds {
		n, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return admin.QueueMemory{}, memoryErr("MEMORY USAGE", err)
		default:
			m.Bytes += n
			m.Keys++
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return admin.QueueMemory{}, memoryErr("MEMORY USAGE", err)
	}
	return m, nil
}

// serverMemory reads INFO memory of the server, or of every master of a
// cluster. A server that refuses INFO gives an error wrapping
// admin.ErrMemoryNotReadable, and is not asked again by this broker (a refused
// command is logged by the server's ACL log at each try); with
// Options.Functions it is not asked at all, as broker.New does not ask for
// INFO server.
func (b *Broker) serverMemory(ctx context.Context) (admin.ServerMemory, error) {
	if b.opts.Functions {
		return admin.ServerMemory{}, fmt.Errorf("%w: INFO not sent (Options.Functions: its Redis user is given no INFO)", admin.ErrMemoryNotReadable)
	}
	if err := b.infoRefused.Load(); err != nil {
		return admin.ServerMemory{}, *err
	}
	var (
		m  admin.ServerMemory
		mu sync.Mutex
	)
	read := func(ctx context.Context, c *redis.Client) error {
		raw, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		f := map[string]string{}
		for line := range strings.Lines(raw) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				f[k] = v
			}
		}
		used, err := strconv.ParseInt(f["used_memory"], 10, 64)
		if err != nil {
			return fmt.Errorf("%w: INFO memory names no used_memory", admin.ErrMemoryNotReadable)
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
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		err = fmt.Errorf("%w: a %T is neither one server's client nor a cluster's", admin.ErrMemoryNotReadable, b.rdb)
	}
	if err != nil {
		var reply redis.Error
		refused := errors.As(err, &reply)
		err = memoryErr("INFO memory", err)
		if refused {
			b.infoRefused.Store(&err)
		}
		return admin.ServerMemory{}, err
	}
	return m, nil
}

// memoryErr wraps a server's refusal of cmd in admin.ErrMemoryNotReadable; a
// failure to reach the server is returned as it is.
func memoryErr(cmd string, err error) error {
	if errors.Is(err, admin.ErrMemoryNotReadable) {
		return err
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return fmt.Errorf("%w: %s refused: %w", admin.ErrMemoryNotReadable, cmd, err)
	}
	return err
}
