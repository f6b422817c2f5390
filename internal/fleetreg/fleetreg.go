// Package fleetreg keeps a process registered in the process registry of
// package fleet while it runs: worker.Worker, periodic.Scheduler and
// outbox.Relay register themselves with it (unless their ProcessTTL is
// negative); package fleet lists them.
//
//	reg, err := fleetreg.New(rdb, ns, fleet.Process{
//		Role:   fleet.RoleWorker,
//		Queues: []fleet.Queue{{Name: "orders", Concurrency: 20}},
//		Types:  registry.Types(),
//	}, fleetreg.Options{Held: func() []fleet.HeldJob { ... }})
//	go reg.Run(ctx) // beats every TTL/3; deregisters when ctx is done
//
// A process's record is a string ns:{:fleet}:proc:<id> (JSON) that expires
// TTL after its last heartbeat, and the sorted set ns:{:fleet}:procs holds
// every id scored by when it expires (see package fleet's doc for the cost
// and the clock). Package fleet's tests cover it: each registers processes
// and reads them back with fleet.List.
package fleetreg

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
)

// DefaultTTL is a registration's expiry when Options.TTL is 0: a process
// not heard from for this long is gone from fleet.List. The ProcessTTL
// docs of worker, periodic and outbox state it (15 s).
const DefaultTTL = 15 * time.Second

// MinTTL is the shortest expiry a registration may have (100 ms, as the
// ProcessTTL docs state).
const MinTTL = 100 * time.Millisecond

// maxHeldJobs is the most held jobs a process's record lists by id
// (Process.HeldJobs); Process.Held counts them all.
const maxHeldJobs = 100

// Options configure a Registration.
type Options struct {
	// TTL is how long the registration lives after each heartbeat; Run
	// beats every TTL/3. Default DefaultTTL; at least MinTTL.
	TTL time.Duration
	// Held, when set, is called at every heartbeat for the jobs the
	// process holds at that moment.
	Held func() []fleet.HeldJob
	// OnError, when set, is told of a heartbeat that failed (Run goes on
	// and tries again at the next beat).
	OnError func(error)
}

// Registration keeps one process registered while it runs.
type Registration struct {
	rdb  redis.UniversalClient
	keys keyspace.FleetKeys
	opts Options

	mu      sync.Mutex
	p       fleet.Process
	started bool
}

// New returns a registration of p in namespace ns ("" for "delayq")
// of rdb. Role is required; ID, Host, PID and Version are filled in when
// empty; Started, Seen, TTL and Held are set by the heartbeats. It checks
// its input but contacts nothing: Beat or Run registers. Bad input (no
// role, a TTL below MinTTL, unprintable names, a bad namespace) gets an
// error wrapping job.ErrInvalid.
func New(rdb redis.UniversalClient, ns string, p fleet.Process, opts Options) (*Registration, error) {
	if rdb == nil {
		return nil, fmt.Errorf("fleet: %w: nil Redis client", naming.ErrInvalid)
	}
	ns, err := namespace(ns)
	if err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL < MinTTL {
		return nil, fmt.Errorf("fleet: %w: TTL %s is below the minimum %s", naming.ErrInvalid, opts.TTL, MinTTL)
	}
	if p.Role == "" {
		return nil, fmt.Errorf("fleet: %w: a process needs a Role", naming.ErrInvalid)
	}
	if p.Host == "" {
		p.Host, _ = os.Hostname()
		p.Host = cmp.Or(p.Host, "localhost")
	}
	if p.PID == 0 {
		p.PID = os.Getpid()
	}
	if p.Version == "" {
		p.Version = Version()
	}
	for what, s := range map[string]string{"role": p.Role, "host": p.Host, "version": p.Version, "id": p.ID} {
		if err := printable(what, s); err != nil {
			return nil, err
		}
	}
	if p.ID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		p.ID = p.Host + ":" + strconv.Itoa(p.PID) + ":" + hex.EncodeToString(b[:])
	}
	p.Queues = slices.Clone(p.Queues)
	p.Types = slices.Clone(p.Types)
	p.TTL = opts.TTL
	return &Registration{rdb: rdb, keys: keyspace.Fleet(ns), opts: opts, p: p}, nil
}

func printable(what, s string) error {
	if len(s) > 200 {
		return fmt.Errorf("fleet: %w: %s is %d bytes long, the limit is 200", naming.ErrInvalid, what, len(s))
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("fleet: %w: %s %q contains %q; it must be printable", naming.ErrInvalid, what, s, r)
		}
	}
	return nil
}

// Version is the version of the delayq module in the running binary's
// build information, "(devel)" when it has none.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == modulePath && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath && d.Version != "" {
			return d.Version
		}
	}
	return "(devel)"
}

const modulePath = "github.com/delayq/delayq"

// ID is the process's registration id.
func (r *Registration) ID() string { return r.p.ID }

// Update changes the registered record (queues, types, info) from the next
// heartbeat on.
func (r *Registration) Update(fn func(p *fleet.Process)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ttl, started := r.p.ID, r.p.TTL, r.p.Started
	fn(&r.p)
	r.p.ID, r.p.TTL, r.p.Started = id, ttl, started
}

// Beat records the process now: its record, expiring after the TTL, and
// its place in the index; in the same MULTI it drops from the index the
// processes whose registrations ran out and sets the index's own expiry to
// the latest registration it holds, so that the index outlives no process:
// once the last one stopped beating (killed, or its network gone) and its
// TTL passed, no key of the registry is left. Two round trips (the
// server's clock with the index's latest expiry, then the MULTI), O(log N)
// plus the expired entries it removes.
func (r *Registration) Beat(ctx context.Context) error {
	var clock *redis.TimeCmd
	var latest *redis.ZSliceCmd
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		clock = p.Time(ctx)
		latest = p.ZRangeWithScores(ctx, r.keys.Index, -1, -1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fleet: heartbeat: %w", err)
	}
	now := clock.Val()
	var held []fleet.HeldJob
	if r.opts.Held != nil {
		held = r.opts.Held()
	}
	r.mu.Lock()
	if !r.started {
		r.p.Started, r.started = now, true
	}
	r.p.Seen = now
	r.p.Held = len(held)
	r.p.HeldJobs = held[:min(len(held), maxHeldJobs)]
	raw, err := json.Marshal(&r.p)
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("fleet: heartbeat: %w", err)
	}
	ttl := r.opts.TTL
	expires := now.Add(ttl).UnixMilli()
	// The index lives until the latest registration it holds runs out: this
	// one's, or a longer one another process recorded before the clock was
	// read. (A process registering for the first time with a longer TTL in
	// the instant between this read and this MULTI is kept by its own next
	// beat; every later beat reads it.) PEXPIRE, not PEXPIREAT: the
	// namespace's Redis user may run only the former (docs/security.md).
	keep := expires
	if l := latest.Val(); len(l) == 1 && int64(l[0].Score) > keep {
		keep = int64(l[0].Score)
	}
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.keys.Proc+r.p.ID, raw, ttl)
		p.ZAdd(ctx, r.keys.Index, redis.Z{Score: float64(expires), Member: r.p.ID})
		p.ZRemRangeByScore(ctx, r.keys.Index, "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
		p.PExpire(ctx, r.keys.Index, time.Duration(keep-now.UnixMilli())*time.Millisecond)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fleet: heartbeat: %w", err)
	}
	return nil
}

// Deregister removes the registration at once (a clean stop).
func (r *Registration) Deregister(ctx context.Context) error {
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.keys.Proc+r.p.ID)
		p.ZRem(ctx, r.keys.Index, r.p.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fleet: deregister: %w", err)
	}
	return nil
}

// Run registers the process and beats every TTL/3 until ctx is done, then
// deregisters it (within a TTL) and returns nil. A failed beat is passed to
// Options.OnError and tried again at the next one; a process that cannot
// beat for a whole TTL drops out of List, as a killed one does.
func (r *Registration) Run(ctx context.Context) error {
	every := r.opts.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, every)
		err := r.Beat(bctx)
		cancel()
		if err != nil && ctx.Err() == nil && r.opts.OnError != nil {
			r.opts.OnError(err)
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.TTL)
			defer cancel()
			if err := r.Deregister(dctx); err != nil && r.opts.OnError != nil {
				r.opts.OnError(err)
			}
			return nil
		case <-t.C:
		}
	}
}

// namespace checks ns as package broker does (keyspace.Namespace).
func namespace(ns string) (string, error) {
	ns, msg := keyspace.Namespace(ns)
	if msg != "" {
		return "", fmt.Errorf("fleet: %w: %s", naming.ErrInvalid, msg)
	}
	return ns, nil
}
