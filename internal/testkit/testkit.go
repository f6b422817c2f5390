// Package testkit is what delayq's own tests share: a broker on a namespace
// of its own, a worker that runs until the test ends, the key layout taken
// from the broker itself, a test logger, and shortcuts into the worker
// protocol for putting jobs into a state (claimed, dead).
package testkit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// Bundle is one test's broker, on a namespace of its own of the shared
// test server (see redistest.New), with an empty registry.
type Bundle struct {
	t   testing.TB
	Ctx context.Context
	RDB redis.UniversalClient
	NS  string
	B   *broker.Broker
	Reg *job.Registry
}

// Setup returns a Bundle; opts adjust the broker's options (the namespace
// is set already).
func Setup(t testing.TB, opts ...func(*broker.Options)) *Bundle {
	t.Helper()
	rdb, ns := redistest.New(t)
	o := broker.Options{Namespace: ns}
	for _, f := range opts {
		f(&o)
	}
	return &Bundle{t: t, Ctx: context.Background(), RDB: rdb, NS: ns, B: NewBroker(t, rdb, o), Reg: job.NewRegistry()}
}

// NewBroker returns a broker over rdb, failing the test on bad options.
func NewBroker(t testing.TB, rdb redis.UniversalClient, o broker.Options) *broker.Broker {
	t.Helper()
	b, err := broker.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Logger returns a logger that writes to the test's log at warn level and
// above.
func Logger(t testing.TB) *zerolog.Logger {
	l := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	return &l
}

// Config returns a worker config for the bundle with defaults for tests:
// a 5 s lease, 1 s MaxIdle, the test logger.
func (bd *Bundle) Config(t testing.TB) worker.Options {
	return worker.Options{Broker: bd.B, Registry: bd.Reg, Lease: 5 * time.Second, MaxIdle: time.Second, Logger: Logger(t)}
}

// Keys returns the keys of queue, which must have one shard.
func (bd *Bundle) Keys(queue string) keyspace.Keys { return Keys(bd.t, bd.B, queue) }

// Key returns one key of a physical queue; see the function Key.
func (bd *Bundle) Key(name, field string) string { return Key(bd.t, bd.B, name, field) }

// StartWorker runs a worker of cfg, with mws appended to its Middleware, until the test
// ends or the returned stop is called; stop waits for Run to return.
func StartWorker(t testing.TB, cfg worker.Options, mws ...job.Middleware) (stop func()) {
	t.Helper()
	cfg.Middleware = append(cfg.Middleware[:len(cfg.Middleware):len(cfg.Middleware)], mws...)
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// Shards returns the shards of queue as b routes it.
func Shards(t testing.TB, b *broker.Broker, queue string) []keyspace.Shard {
	t.Helper()
	shards, err := protocol.For(b).Shards(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return shards
}

// Keys returns the keys of queue as b builds them; the queue must have one
// shard.
func Keys(t testing.TB, b *broker.Broker, queue string) keyspace.Keys {
	t.Helper()
	shards := Shards(t, b, queue)
	if len(shards) != 1 {
		t.Fatalf("testkit.Keys: queue %q has %d shards", queue, len(shards))
	}
	return shards[0].Keys()
}

// Key returns one key of a physical queue as b builds it: name is the
// queue (or one shard's name, "q#1") and field the key's last part, as in
// "ns:{q}:field": scheduled, processing, jobs, attempts, leases, seq, dead,
// dead:index, dead:trimmed, counts, unique, batched, controls, hist: (the
// history prefix) or wake (the channel).
func Key(t testing.TB, b *broker.Broker, name, field string) string {
	t.Helper()
	for _, s := range Shards(t, b, keyspace.Logical(name)) {
		if field == "wake" {
			return s.Keys().Wake // one channel for every shard of a queue
		}
		if s.Name() != name {
			continue
		}
		k := s.Keys()
		if minute, ok := strings.CutPrefix(field, "hist:"); ok {
			return k.Hist + minute
		}
		switch field {
		case "scheduled":
			return k.Scheduled
		case "processing":
			return k.Processing
		case "jobs":
			return k.Jobs
		case "attempts":
			return k.Attempts
		case "leases":
			return k.Leases
		case "seq":
			return k.Seq
		case "dead":
			return k.Dead
		case "dead:index":
			return k.DeadIndex
		case "dead:trimmed":
			return k.Trimmed
		case "counts":
			return k.Counts
		case "unique":
			return k.Unique
		case "batched":
			return k.Batched
		case "controls":
			return k.Controls
		}
		t.Fatalf("testkit.Key: no key %q", field)
	}
	t.Fatalf("testkit.Key: no physical queue %q", name)
	return ""
}

// Claim leases up to n due jobs of queue (over its shards) for lease, as a
// worker would.
func Claim(t testing.TB, b *broker.Broker, queue string, n int, lease time.Duration) []protocol.Claimed {
	t.Helper()
	res, err := Drive(b).Claim(context.Background(), queue, n, lease)
	if err != nil {
		t.Fatal(err)
	}
	return res.Jobs
}

// Kill dead-letters a claimed job with reason, as a worker would.
func Kill(t testing.TB, b *broker.Broker, c protocol.Claimed, reason string) time.Time {
	t.Helper()
	rec := &job.DeadRecord{Body: c.Body, Error: reason, Attempts: c.Attempt}
	if c.Envelope != nil {
		rec.Type = c.Envelope.Type
	}
	died, err := Drive(b).Kill(context.Background(), c.Lease, rec)
	if err != nil {
		t.Fatal(err)
	}
	return died
}

// Driver drives a broker's worker protocol the way tests do: by queue name
// (over every shard, in order) rather than shard by shard, one call per
// outcome kind.
type Driver struct {
	p protocol.Broker
}

// Drive returns the Driver of b.
func Drive(b *broker.Broker) Driver { return Driver{protocol.For(b)} }

// driver is the caller of every Driver: one worker, as far as the broker
// can tell; calls get ids of their own.
var (
	driver   = protocol.Caller{ID: "testkit", Lease: time.Minute}
	driverID atomic.Uint64
)

func nextID() string { return strconv.FormatUint(driverID.Add(1), 10) }

// Claim claims up to n due jobs of queue, asking its shards in order for
// what the earlier ones left. Next is the earliest next ready time of the
// shards (in the first shard's clock); Paused is whether any shard was.
func (d Driver) Claim(ctx context.Context, queue string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	shards, err := d.p.Shards(ctx, queue)
	if err != nil {
		return protocol.ClaimResult{}, err
	}
	var out protocol.ClaimResult
	for i, s := range shards {
		res, err := d.p.Claim(ctx, s, driver, nextID(), max(n-len(out.Jobs), 0), lease)
		if err != nil {
			return protocol.ClaimResult{}, err
		}
		if i == 0 {
			out.Now = res.Now
		}
		if !res.Next.IsZero() {
			if next := out.Now.Add(res.Next.Sub(res.Now)); out.Next.IsZero() || next.Before(out.Next) {
				out.Next = next
			}
		}
		out.Jobs = append(out.Jobs, res.Jobs...)
		out.Orphans = append(out.Orphans, res.Orphans...)
		out.Paused = out.Paused || res.Paused
		if n > 0 && len(out.Jobs) >= n {
			break
		}
	}
	return out, nil
}

// ClaimShard claims up to n due jobs of one shard.
func (d Driver) ClaimShard(ctx context.Context, s keyspace.Shard, n int, lease time.Duration) (protocol.ClaimResult, error) {
	return d.p.Claim(ctx, s, driver, nextID(), n, lease)
}

// Reap lists up to limit expired leases of queue over its shards.
func (d Driver) Reap(ctx context.Context, queue string, limit int) (protocol.ReapResult, error) {
	shards, err := d.p.Shards(ctx, queue)
	if err != nil {
		return protocol.ReapResult{}, err
	}
	var out protocol.ReapResult
	for i, s := range shards {
		res, err := d.p.Reap(ctx, s, limit-len(out.Jobs))
		if err != nil {
			return protocol.ReapResult{}, err
		}
		if i == 0 {
			out.Now = res.Now
		}
		out.Jobs = append(out.Jobs, res.Jobs...)
		out.Orphans = append(out.Orphans, res.Orphans...)
		if len(out.Jobs) >= limit {
			break
		}
	}
	return out, nil
}

// Settle records ops, of any shards, one Settle call per shard. It returns
// each op's result, and nil or a *job.BatchError aligned with ops.
func (d Driver) Settle(ctx context.Context, ops ...protocol.Op) ([]protocol.Settled, error) {
	out := make([]protocol.Settled, len(ops))
	errs := make([]error, len(ops))
	failed := false
	done := map[string]bool{}
	for _, op := range ops {
		s := op.Lease.Shard
		if done[s.Name()] {
			continue
		}
		done[s.Name()] = true
		var idx []int
		var these []protocol.Op
		for i, o := range ops {
			if o.Lease.Shard.Name() == s.Name() {
				idx = append(idx, i)
				these = append(these, o)
			}
		}
		res, err := d.p.Settle(ctx, s, driver, protocol.LaneSettle, nextID(), these)
		for j, i := range idx {
			switch {
			case res == nil:
				errs[i] = err
			default:
				out[i] = res[j]
				errs[i] = res[j].Err
			}
			failed = failed || errs[i] != nil
		}
	}
	if !failed {
		return out, nil
	}
	return out, &job.BatchError{Errs: errs}
}

// Ack acknowledges leases: nil or a *job.BatchError aligned with them.
func (d Driver) Ack(ctx context.Context, leases ...protocol.Lease) error {
	return d.each(ctx, protocol.OpAck, leases)
}

// Release hands leases back without spending their attempts.
func (d Driver) Release(ctx context.Context, leases ...protocol.Lease) error {
	return d.each(ctx, protocol.OpRelease, leases)
}

func (d Driver) each(ctx context.Context, kind protocol.OpKind, leases []protocol.Lease) error {
	ops := make([]protocol.Op, len(leases))
	for i, l := range leases {
		ops[i] = protocol.Op{Kind: kind, Lease: l}
	}
	_, err := d.Settle(ctx, ops...)
	return err
}

// one settles a single op and returns its time or error.
func (d Driver) one(ctx context.Context, op protocol.Op) (time.Time, error) {
	res, err := d.Settle(ctx, op)
	var be *job.BatchError
	if errors.As(err, &be) {
		err = be.Errs[0]
	}
	if err != nil {
		return time.Time{}, err
	}
	return res[0].At, nil
}

// Extend is protocol.Broker.Extend.
func (d Driver) Extend(ctx context.Context, lease time.Duration, leases ...protocol.Lease) error {
	return d.p.Extend(ctx, lease, leases...)
}

// Retry retries a held job.
func (d Driver) Retry(ctx context.Context, l protocol.Lease, delay time.Duration, env *job.Envelope) (time.Time, error) {
	return d.one(ctx, protocol.Op{Kind: protocol.OpRetry, Lease: l, Delay: delay, Env: env})
}

// RetryExpired retries a job whose lease ran out, as the reaper does.
func (d Driver) RetryExpired(ctx context.Context, l protocol.Lease, delay time.Duration, env *job.Envelope) (time.Time, error) {
	return d.one(ctx, protocol.Op{Kind: protocol.OpRetry, Lease: l, Delay: delay, Env: env, Expired: true})
}

// Kill dead-letters a held job with rec's type, body, error and attempts,
// and sets rec's DiedAt.
func (d Driver) Kill(ctx context.Context, l protocol.Lease, rec *job.DeadRecord) (time.Time, error) {
	return d.kill(ctx, l, rec, false)
}

// KillExpired dead-letters a job whose lease ran out, as the reaper does.
func (d Driver) KillExpired(ctx context.Context, l protocol.Lease, rec *job.DeadRecord) (time.Time, error) {
	return d.kill(ctx, l, rec, true)
}

func (d Driver) kill(ctx context.Context, l protocol.Lease, rec *job.DeadRecord, expired bool) (time.Time, error) {
	died, err := d.one(ctx, protocol.Op{Kind: protocol.OpKill, Lease: l, Expired: expired,
		Death: protocol.Death{Type: rec.Type, Body: rec.Body, Error: rec.Error, Attempts: rec.Attempts}})
	if err == nil {
		rec.ID, rec.Queue, rec.DiedAt = l.ID, l.Queue(), died
	}
	return died, err
}

// Wakeups is protocol.Broker.Wakeups.
func (d Driver) Wakeups(ctx context.Context, queues []string) (<-chan string, func()) {
	return d.p.Wakeups(ctx, queues)
}

// Items makes one job.Item per element of args, each with opts: the bulk
// enqueue of many jobs that share their options.
func Items[T any](args []T, opts ...job.Option) []job.Item[T] {
	items := make([]job.Item[T], len(args))
	for i, a := range args {
		items[i] = job.Item[T]{Args: a, Opts: opts}
	}
	return items
}

// OneStats is the stats of the one queue a Broker.Stats call named:
// OneStats(b.Stats(ctx, "q")).
func OneStats(sts []job.QueueStats, err error) (job.QueueStats, error) {
	if err != nil {
		return job.QueueStats{}, err
	}
	if len(sts) != 1 {
		return job.QueueStats{}, errors.New("testkit: Stats returned " + strconv.Itoa(len(sts)) + " queues, want 1")
	}
	return sts[0], nil
}
