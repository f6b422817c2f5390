package fleet

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
)

// Roles of the processes delayq's own packages register.
const (
	RoleWorker    = "worker"       // claims and runs jobs of its Queues
	RoleScheduler = "scheduler"    // a periodic.Scheduler
	RoleRelay     = "outbox-relay" // an outbox.Relay
)

// DefaultTTL is a registration's expiry when Options.TTL is 0: a process
// not heard from for this long is gone from List.
const DefaultTTL = 15 * time.Second

// MinTTL is the shortest expiry a registration may have.
const MinTTL = 100 * time.Millisecond

// MaxList is the most processes List returns; Snapshot.More counts the
// others.
const MaxList = 1000

// MaxHeldJobs is the most held jobs a process's record lists by id
// (Process.HeldJobs); Process.Held counts them all.
const MaxHeldJobs = 100

// DefaultNamespace is the namespace of an empty ns, as in package broker.
const DefaultNamespace = "delayq"

// ErrInvalid is wrapped by the errors of bad input: nothing was stored.
var ErrInvalid = errors.New("fleet: invalid input")

// Queue is a queue a process serves.
type Queue struct {
	Name string `json:"name"`
	// Concurrency is how many of its jobs the process runs at once; 0 when
	// it does not say.
	Concurrency int `json:"concurrency,omitempty"`
}

// HeldJob is a job a process holds: leased and running, or being settled.
type HeldJob struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
}

// Process is one running process's registration, as it last recorded it.
type Process struct {
	ID      string            `json:"id"`      // unique per registration: host, pid and a random suffix
	Role    string            `json:"role"`    // RoleWorker, RoleScheduler, RoleRelay, or the application's own
	Host    string            `json:"host"`    // os.Hostname unless given
	PID     int               `json:"pid"`     // os.Getpid unless given
	Version string            `json:"version"` // the delayq module version the process was built with, unless given
	Queues  []Queue           `json:"queues,omitempty"`
	Types   []string          `json:"types,omitempty"` // job types it handles (or enqueues, for a scheduler)
	Info    map[string]string `json:"info,omitempty"`  // what else its role shows: a relay's table, a scheduler's schedules
	// Started is when the process registered, Seen when it last recorded
	// itself, both by the Redis server's clock.
	Started time.Time     `json:"started"`
	Seen    time.Time     `json:"seen"`
	TTL     time.Duration `json:"ttl"`
	// Held is how many jobs the process held when it last recorded
	// itself; HeldJobs lists at most MaxHeldJobs of them.
	Held     int       `json:"held"`
	HeldJobs []HeldJob `json:"held_jobs,omitempty"`
}

// Expires is when the registration runs out unless the process records
// itself again.
func (p Process) Expires() time.Time { return p.Seen.Add(p.TTL) }

// Serves reports whether the process claims jobs of queue.
func (p Process) Serves(queue string) bool {
	return slices.ContainsFunc(p.Queues, func(q Queue) bool { return q.Name == queue })
}

// Options configure a Registration.
type Options struct {
	// TTL is how long the registration lives after each heartbeat; Run
	// beats every TTL/3. Default DefaultTTL; at least MinTTL.
	TTL time.Duration
	// Held, when set, is called at every heartbeat for the jobs the
	// process holds at that moment.
	Held func() []HeldJob
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
	p       Process
	started bool
}

// New returns a registration of p in namespace ns ("" for DefaultNamespace)
// of rdb. Role is required; ID, Host, PID and Version are filled in when
// empty; Started, Seen, TTL and Held are set by the heartbeats. It checks
// its input but contacts nothing: Beat or Run registers. Bad input (no
// role, a TTL below MinTTL, unprintable names, a bad namespace) gets an
// error wrapping ErrInvalid.
func New(rdb redis.UniversalClient, ns string, p Process, opts Options) (*Registration, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalid)
	}
	ns, err := namespace(ns)
	if err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL < MinTTL {
		return nil, fmt.Errorf("%w: TTL %s is below the minimum %s", ErrInvalid, opts.TTL, MinTTL)
	}
	if p.Role == "" {
		return nil, fmt.Errorf("%w: a process needs a Role", ErrInvalid)
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
		return fmt.Errorf("%w: %s is %d bytes long, the limit is 200", ErrInvalid, what, len(s))
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s %q contains %q; it must be printable", ErrInvalid, what, s, r)
		}
	}
	return nil
}

// namespace checks ns as package broker does: letters, digits and '._-:',
// at most 64 bytes.
func namespace(ns string) (string, error) {
	if ns == "" {
		return DefaultNamespace, nil
	}
	if len(ns) > 64 {
		return "", fmt.Errorf("%w: namespace is %d bytes long, the limit is 64", ErrInvalid, len(ns))
	}
	for _, r := range ns {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == ':':
		default:
			return "", fmt.Errorf("%w: namespace %q contains %q; allowed are letters, digits and '._-:'", ErrInvalid, ns, r)
		}
	}
	return ns, nil
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
func (r *Registration) Update(fn func(p *Process)) {
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
	var held []HeldJob
	if r.opts.Held != nil {
		held = r.opts.Held()
	}
	r.mu.Lock()
	if !r.started {
		r.p.Started, r.started = now, true
	}
	r.p.Seen = now
	r.p.Held = len(held)
	r.p.HeldJobs = held[:min(len(held), MaxHeldJobs)]
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

// Snapshot is the registry as List read it.
type Snapshot struct {
	Now       time.Time // the Redis server's clock when it was read
	Processes []Process // live processes, by role, host, pid and id
	More      int64     // live processes beyond MaxList, not listed
	// Unreadable names the records List could not read (not a string, or
	// not a process's JSON), each with why, sorted; the other processes
	// are listed beside them.
	Unreadable []string
}

// Serving returns the processes that claim jobs of queue.
func (s Snapshot) Serving(queue string) []Process {
	var out []Process
	for _, p := range s.Processes {
		if p.Serves(queue) {
			out = append(out, p)
		}
	}
	return out
}

// Served reports whether some listed process claims jobs of queue.
func (s Snapshot) Served(queue string) bool {
	return slices.ContainsFunc(s.Processes, func(p Process) bool { return p.Serves(queue) })
}

// List returns the live processes of namespace ns ("" for
// DefaultNamespace): those whose registration has not run out by the Redis
// server's clock. A killed process is listed until its TTL after its last
// heartbeat, then never again. A record that cannot be read is named in
// Snapshot.Unreadable and hides no other process. It changes nothing. Three round trips
// (the clock, the index, the records), and a fourth, the clock again, when
// a registration ran out between the first and the third (Snapshot.Now is
// then that later time); it reads at most MaxList records.
func List(ctx context.Context, rdb redis.UniversalClient, ns string) (Snapshot, error) {
	if rdb == nil {
		return Snapshot{}, fmt.Errorf("%w: nil Redis client", ErrInvalid)
	}
	ns, err := namespace(ns)
	if err != nil {
		return Snapshot{}, err
	}
	keys := keyspace.Fleet(ns)
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return Snapshot{}, fmt.Errorf("fleet: list: %w", err)
	}
	min := strconv.FormatInt(now.UnixMilli(), 10)
	var ids *redis.StringSliceCmd
	var count *redis.IntCmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ids = p.ZRangeByScore(ctx, keys.Index, &redis.ZRangeBy{Min: min, Max: "+inf", Count: MaxList})
		count = p.ZCount(ctx, keys.Index, min, "+inf")
		return nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("fleet: list: read %s: %w", keys.Index, err)
	}
	snap := Snapshot{Now: now}
	if len(ids.Val()) == 0 {
		return snap, nil
	}
	recs := make([]string, len(ids.Val()))
	for i, id := range ids.Val() {
		recs[i] = keys.Proc + id
	}
	// GETs in one pipeline rather than MGET: the namespace's Redis user of
	// docs/security.md may run GET but not MGET.
	gets := make([]*redis.StringCmd, len(recs))
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range recs {
			gets[i] = p.Get(ctx, k)
		}
		return nil
	})
	var reply redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &reply) {
		return Snapshot{}, fmt.Errorf("fleet: list: read records: %w", err)
	}
	vanished := false
	for i, g := range gets {
		s, err := g.Result()
		if errors.Is(err, redis.Nil) {
			vanished = true // expired between the two reads
			continue
		}
		if err != nil {
			snap.Unreadable = append(snap.Unreadable, fmt.Sprintf("%s: %v", recs[i], err))
			continue
		}
		var p Process
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			snap.Unreadable = append(snap.Unreadable, fmt.Sprintf("%s: does not decode: %v", recs[i], err))
			continue
		}
		if p.Expires().Before(now) {
			continue
		}
		snap.Processes = append(snap.Processes, p)
	}
	if vanished {
		// A registration ran out after the clock was read: the snapshot
		// is of a later time than now. The clock is read again, after the
		// records, and what ran out by then is left out too, so that no
		// process is missing from a snapshot whose time is before its
		// registration ran out.
		later, err := rdb.Time(ctx).Result()
		if err != nil {
			return Snapshot{}, fmt.Errorf("fleet: list: %w", err)
		}
		if later.After(now) {
			snap.Now = later
			snap.Processes = slices.DeleteFunc(snap.Processes, func(p Process) bool { return p.Expires().Before(later) })
		}
	}
	slices.Sort(snap.Unreadable)
	slices.SortFunc(snap.Processes, func(a, b Process) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID), cmp.Compare(a.ID, b.ID))
	})
	snap.More = max(count.Val()-int64(len(ids.Val())), 0)
	return snap, nil
}

// ServingCounts returns a function that counts, at each call, the live
// processes of namespace ns serving each queue (one List): the count
// middleware.WithServingProcesses takes for the delayq.queue.processes
// gauge. A queue no live process serves is absent from the map, which is
// never nil when err is nil. Processes beyond MaxList are not counted.
func ServingCounts(rdb redis.UniversalClient, ns string) func(ctx context.Context) (map[string]int64, error) {
	return func(ctx context.Context) (map[string]int64, error) {
		snap, err := List(ctx, rdb, ns)
		if err != nil {
			return nil, err
		}
		counts := map[string]int64{}
		for _, p := range snap.Processes {
			seen := map[string]bool{}
			for _, q := range p.Queues {
				if !seen[q.Name] {
					seen[q.Name] = true
					counts[q.Name]++
				}
			}
		}
		return counts, nil
	}
}
