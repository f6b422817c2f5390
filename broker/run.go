package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Running scripts.
//
// Every script call goes through run (one call; runFrame for the calls
// per batch of jobs, which build the command whole) or runReads (many
// read-only calls in one round trip). Both send EVALSHA and fall back to
// EVAL or SCRIPT LOAD when the server's script cache lacks the script
// (after a restart or SCRIPT FLUSH), ask a cluster client to reload its
// slot map after an error that suggests the map changed, and pass ARGV[1],
// "now": empty for the server's TIME, a value only with a test's clock (UseClock).
// With Options.Functions they send FCALL (FCALL_RO for read-only scripts)
// of the script's function in the loaded library instead (functions.go),
// with the same keys and arguments; there is no fallback: a missing
// function is an error wrapping ErrFunctionsNotLoaded.
//
// Replication and failover. Redis replicates asynchronously: a write
// acknowledged by a master can be lost if the master dies before its
// replica has it and the replica is promoted. With Options.WaitReplicas set,
// every script that changes jobs (all but those whose header says
// "-- read-only") is followed, in the same pipeline and so on the same
// connection, by WAIT numreplicas timeout, which blocks until that many
// replicas have acknowledged everything the connection wrote. On a cluster
// the pipeline goes to the master of the script's first key (go-redis
// would route a keyless WAIT to another node, or to all of them). A
// shortfall is an error wrapping ErrNotReplicated.
//
// WAIT covers what its connection wrote, and a script that finds nothing
// to change (a duplicate id, a lost lease) writes nothing; a WAIT after it
// would confirm only that connection's earlier writes, not the state the
// script read, which may have been written by a call whose WAIT fell
// short. So each pipeline also writes "INCRBY ns:{q}:seq 0", which changes
// nothing but moves the connection to the master's latest replication
// offset: an ErrDuplicate from a durable Enqueue means the stored job is
// on the replicas too.
//
// go-redis reloads a cluster's slot map after MOVED replies and once a
// minute, not when a master stops answering; the broker asks for a reload
// whenever a command fails for a reason other than a Redis error reply, so
// that it finds the promoted replica once one call has failed.

// defaultWaitTimeout is the default of Options.WaitTimeout.
const defaultWaitTimeout = time.Second

// ErrNotReplicated: with Options.WaitReplicas set, a change was made on the
// master but fewer replicas than asked confirmed it within
// Options.WaitTimeout. The change stands on the master; whether it survives
// a failover that happens now is unknown. The error of a call that changes
// jobs is a *CallError: Resend sends the very call again, which changes
// nothing a second time and returns the first outcome (nil for a job the
// call stored, even if it ran meanwhile) once the replicas confirm it; a
// failover that lost the change lost its call record with it, and the
// resend makes the change again.
var ErrNotReplicated = errors.New("broker: not confirmed by enough replicas")

// nowArg is ARGV[1] of every script: "" for the server's clock.
func (b *Broker) nowArg() string {
	if b.clock == nil {
		return ""
	}
	return strconv.FormatInt(b.clock().UnixMilli(), 10)
}

// run runs s with keys and ARGV[1] = now, ARGV[2...] = args, waiting for
// replicas when the broker is durable and s changes anything. When the
// replicas fall short, the script's result comes with an error wrapping
// ErrNotReplicated.
func (b *Broker) run(ctx context.Context, s *script, keys []string, args ...any) (any, error) {
	return b.runFrame(ctx, s, append(frame(keys, len(args)), args...))
}

// frame returns the command a script call sends, up to ARGV[1]: the
// command and the script's name (set by runFrame), the number of keys,
// keys and now (set by runFrame), with room for n more ARGV values. The
// calls made per batch of jobs (enqueue, settle) append their ARGV to it
// and send it with runFrame, so that go-redis sends it as it is instead
// of copying a few thousand values per call into a command of its own.
func frame(keys []string, n int) []any {
	f := make([]any, 3, 4+len(keys)+n)
	f[2] = len(keys)
	for _, k := range keys {
		f = append(f, k)
	}
	return append(f, nil)
}

// runFrame is run of f, a frame with its ARGV appended. It sends EVALSHA
// of s (FCALL of its function with Options.Functions), EVAL when the
// server lacks the script, as run does.
func (b *Broker) runFrame(ctx context.Context, s *script, f []any) (any, error) {
	nkeys := f[2].(int)
	var key string // the first: the pipeline of a durable call goes to its server
	if nkeys > 0 {
		key = f[3].(string)
	}
	f[3+nkeys] = b.nowArg()
	if b.opts.Functions {
		library() // names the functions
		f[0], f[1] = "fcall", s.fn
		if s.readOnly {
			f[0] = "fcall_ro"
		}
	} else {
		f[0], f[1] = "evalsha", s.lua().Hash()
	}
	if b.opts.WaitReplicas <= 0 || s.readOnly {
		res, err := b.rdb.Do(ctx, f...).Result()
		if !b.opts.Functions && redis.HasErrorPrefix(err, "NOSCRIPT") {
			f[0], f[1] = "eval", s.prepared().src
			res, err = b.rdb.Do(ctx, f...).Result()
		}
		b.observe(err)
		if b.opts.Functions {
			return res, functionErr(s, err)
		}
		return res, err
	}
	send := func() (any, error) {
		var cmd *redis.Cmd
		err := b.pipelined(ctx, key, func(p redis.Pipeliner) {
			cmd = p.Do(ctx, f...)
			p.IncrBy(ctx, seqKeyOf(key), 0) // see the note at the top
		})
		if err != nil && !errors.Is(err, ErrNotReplicated) {
			return nil, err
		}
		// Short of replicas, the script ran on the master: its result
		// comes with the error.
		return cmd.Val(), err
	}
	res, err := send()
	if b.opts.Functions {
		return res, functionErr(s, err)
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		f[0], f[1] = "eval", s.prepared().src
		res, err = send()
	}
	return res, err
}

// read is one call of a read-only script, for runReads.
type read struct {
	s    *script
	keys []string
	args []any
}

// runReads runs read-only calls in one pipelined round trip (two when the
// server has to learn a script first: the calls it did not know are sent
// again as EVAL, which needs no more ACL rights than EVALSHA). The results
// and errors are aligned with calls.
func (b *Broker) runReads(ctx context.Context, calls []read) ([]any, []error) {
	now := b.nowArg()
	res, errs := make([]any, len(calls)), make([]error, len(calls))
	todo := make([]int, len(calls))
	for i, c := range calls {
		if !c.s.readOnly {
			panic("broker: runReads of " + c.s.name + ", which changes data")
		}
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		p := b.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(todo))
		for j, i := range todo {
			c := calls[i]
			argv := append([]any{now}, c.args...)
			switch {
			case b.opts.Functions:
				cmds[j] = fcall(ctx, p, c.s, c.keys, argv)
			case attempt == 0:
				cmds[j] = c.s.lua().EvalSha(ctx, p, c.keys, argv...)
			default:
				cmds[j] = c.s.lua().Eval(ctx, p, c.keys, argv...)
			}
		}
		_, _ = p.Exec(ctx) // errors are read per command
		var again []int
		for j, i := range todo {
			res[i], errs[i] = cmds[j].Result()
			if attempt == 0 && !b.opts.Functions && redis.HasErrorPrefix(errs[i], "NOSCRIPT") {
				again = append(again, i)
				continue
			}
			b.observe(errs[i])
			if b.opts.Functions {
				errs[i] = functionErr(calls[i].s, errs[i])
			}
		}
		todo = again
	}
	return res, errs
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
		if err != nil && cluster && attempt < 3 && slotMoved(err) {
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

// seqKeyOf returns the seq key of the physical queue whose key is given.
func seqKeyOf(key string) string {
	if i := strings.Index(key, "}:"); i >= 0 {
		return key[:i+2] + "seq"
	}
	return key + ":seq"
}

// slotMoved reports errors that mean a cluster command was not run because
// the slot map changed.
func slotMoved(err error) bool {
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
	if errors.As(err, &reply) && !slotMoved(err) && !strings.HasPrefix(err.Error(), "READONLY") {
		return
	}
	cc.ReloadState(context.Background())
}
