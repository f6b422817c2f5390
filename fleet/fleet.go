package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
)

// Roles of the processes delayq's own packages register.
const (
	RoleWorker    = "worker"       // claims and runs jobs of its Queues
	RoleScheduler = "scheduler"    // a periodic.Scheduler
	RoleRelay     = "outbox-relay" // an outbox.Relay
)

// maxList is the most processes List returns; Snapshot.More counts the
// others.
const maxList = 1000

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
	Role    string            `json:"role"`    // RoleWorker, RoleScheduler or RoleRelay
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
	// Expires is when the registration runs out unless the process
	// records itself again: Seen + TTL, filled in by List (not part of the
	// stored record).
	Expires time.Time `json:"-"`
	// Held is how many jobs the process held when it last recorded
	// itself; HeldJobs lists at most 100 of them.
	Held     int       `json:"held"`
	HeldJobs []HeldJob `json:"held_jobs,omitempty"`
}

// serves reports whether the process claims jobs of queue.
func (p Process) serves(queue string) bool {
	return slices.ContainsFunc(p.Queues, func(q Queue) bool { return q.Name == queue })
}

// Snapshot is the registry as List read it.
type Snapshot struct {
	Now       time.Time // the Redis server's clock when it was read
	Processes []Process // live processes, by role, host, pid and id
	More      int64     // live processes beyond the first 1,000, not listed
	// Unreadable names the records List could not read (not a string, or
	// not a process's JSON), each with why, sorted; the other processes
	// are listed beside them.
	Unreadable []string
}

// Serving returns the processes that claim jobs of queue.
func (s Snapshot) Serving(queue string) []Process {
	var out []Process
	for _, p := range s.Processes {
		if p.serves(queue) {
			out = append(out, p)
		}
	}
	return out
}

// namespace checks ns as package broker does (keyspace.Namespace).
func namespace(ns string) (string, error) {
	ns, msg := keyspace.Namespace(ns)
	if msg != "" {
		return "", fmt.Errorf("fleet: %w: %s", naming.ErrInvalid, msg)
	}
	return ns, nil
}

// List returns the live processes of namespace ns ("" for
// "delayq"): those whose registration has not run out by the Redis
// server's clock. A killed process is listed until its TTL after its last
// heartbeat, then never again. A record that cannot be read is named in
// Snapshot.Unreadable and hides no other process. It changes nothing. Three round trips
// (the clock, the index, the records), and a fourth, the clock again, when
// a registration ran out between the first and the third (Snapshot.Now is
// then that later time); it reads at most 1,000 records. A nil client or
// a bad namespace gets an error wrapping job.ErrInvalid.
func List(ctx context.Context, rdb redis.UniversalClient, ns string) (Snapshot, error) {
	if rdb == nil {
		return Snapshot{}, fmt.Errorf("fleet: %w: nil Redis client", naming.ErrInvalid)
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
		ids = p.ZRangeByScore(ctx, keys.Index, &redis.ZRangeBy{Min: min, Max: "+inf", Count: maxList})
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
		p.Expires = p.Seen.Add(p.TTL)
		if p.Expires.Before(now) {
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
			snap.Processes = slices.DeleteFunc(snap.Processes, func(p Process) bool { return p.Expires.Before(later) })
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
// never nil when err is nil. Processes beyond the first 1,000 are not counted.
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
