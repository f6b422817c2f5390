package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replication and failover.
//
// Redis replicates asynchronously: a write acknowledged by a master can be
// lost if the master dies before its replica has it and the replica is
// promoted. With Options.WaitReplicas set, every script that changes jobs is
// followed, in the same pipeline and so on the same connection, by
// WAIT numreplicas timeout, which blocks until that many replicas have
// acknowledged everything the connection wrote. On a cluster the pipeline
// goes to the master of the script's first key (go-redis would route a
// keyless WAIT to another node, or to all of them). A shortfall is an error
// wrapping ErrNotReplicated.
//
// WAIT covers what its connection wrote, and a script that finds nothing to
// change (a duplicate id, a lost lease) writes nothing; a WAIT after it
// would confirm only that connection's earlier writes, not the state the
// script read, which may have been written by a call whose WAIT fell short.
// So each pipeline also writes "INCRBY ns:{q}:seq 0", which changes nothing
// but moves the connection to the master's latest replication offset: an
// ErrDuplicate from a durable Enqueue means the stored job is on the
// replicas too.
//
// go-redis reloads a cluster's slot map after MOVED replies and once a
// minute, not when a master stops answering; the broker asks for a reload
// whenever a command fails for a reason other than a Redis error reply, so
// that it finds the promoted replica once one call has failed.

// DefaultWaitTimeout is the default of Options.WaitTimeout.
const DefaultWaitTimeout = time.Second

// ErrNotReplicated: with Options.WaitReplicas set, a change was made on the
// master but fewer replicas than asked confirmed it within
// Options.WaitTimeout. The change stands on the master; whether it survives
// a failover that happens now is unknown. An Enqueue that fails so may be
// repeated with the same job id: ErrDuplicate then means the job is stored.
var ErrNotReplicated = errors.New("broker: not confirmed by enough replicas")

// readOnly lists scripts that change nothing, which need no WAIT.
func readOnly(s *redis.Script) bool { return s == statsScript }

// exec runs a script (args include ARGV[1], "now"), waiting for replicas
// when the broker is durable.
func (b *Broker) exec(ctx context.Context, s *redis.Script, keys []string, args []any) (any, error) {
	if b.opts.WaitReplicas <= 0 || readOnly(s) {
		res, err := s.Run(ctx, b.rdb, keys, args...).Result()
		b.observe(err)
		return res, err
	}
	run := func(load bool) (any, error) {
		var cmd *redis.Cmd
		err := b.pipelined(ctx, keys[0], func(p redis.Pipeliner) {
			if load {
				cmd = s.Eval(ctx, p, keys, args...)
			} else {
				cmd = s.EvalSha(ctx, p, keys, args...)
			}
			p.IncrBy(ctx, seqKeyOf(keys[0]), 0) // see the note at the top
		})
		if err != nil {
			return nil, err
		}
		return cmd.Val(), nil
	}
	res, err := run(false)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, err = run(true)
	}
	return res, err
}

// pipelined sends fn's commands on one connection to the server that holds
// key (its master, on a cluster), followed by WAIT when the broker is
// durable. It returns the first error of a command, else an error wrapping
// ErrNotReplicated if WAIT fell short. A MOVED or CLUSTERDOWN reply (nothing
// was run) is retried a few times after reloading the slot map.
func (b *Broker) pipelined(ctx context.Context, key string, fn func(redis.Pipeliner)) error {
	cc, cluster := b.rdb.(*redis.ClusterClient)
	for attempt := 0; ; attempt++ {
		var target redis.Cmdable = b.rdb
		if cluster {
			node, err := cc.MasterForKey(ctx, key)
			if err != nil {
				b.observe(err)
				return err
			}
			target = node
		}
		var wait *redis.IntCmd
		cmds, _ := target.Pipelined(ctx, func(p redis.Pipeliner) error {
			fn(p)
			if b.opts.WaitReplicas > 0 {
				// Pipeliner has no Wait: WAIT blocks, which go-redis keeps out of pipelines.
				wait = redis.NewIntCmd(ctx, "wait", b.opts.WaitReplicas, b.opts.WaitTimeout.Milliseconds())
				_ = p.Process(ctx, wait)
			}
			return nil
		})
		var err error
		for _, c := range cmds {
			if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) && c != wait {
				err = e
				break
			}
		}
		if err != nil && cluster && attempt < 3 && retryable(err) {
			cc.ReloadState(ctx)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
			}
			continue
		}
		if err != nil {
			b.observe(err)
			return err
		}
		if wait == nil {
			return nil
		}
		n, err := wait.Result()
		if err != nil {
			b.observe(err)
			return fmt.Errorf("broker: WAIT for replicas: %w", err)
		}
		if n < int64(b.opts.WaitReplicas) {
			return fmt.Errorf("%w: %d of %d replica(s) within %s", ErrNotReplicated, n, b.opts.WaitReplicas, b.opts.WaitTimeout)
		}
		return nil
	}
}

// seqKeyOf returns the seq key of the queue whose key is given.
func seqKeyOf(key string) string {
	if i := strings.Index(key, "}:"); i >= 0 {
		return key[:i+2] + "seq"
	}
	return key + ":seq"
}

// retryable reports errors that mean a cluster command was not run because
// the slot map changed.
func retryable(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "TRYAGAIN")
}

// observe asks a cluster client to reload its slot map after an error that
// is not a Redis error reply (a node that does not answer, a dropped
// connection) or that says the slot map changed.
func (b *Broker) observe(err error) {
	cc, ok := b.rdb.(*redis.ClusterClient)
	if !ok || err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) && !retryable(err) && !strings.HasPrefix(err.Error(), "READONLY") {
		return
	}
	cc.ReloadState(context.Background())
}
