package admin

import (
	"context"
	"errors"
	"time"
)

// Broker is the operator's side of a *broker.Broker: what the CLI and the
// dashboard read and do beyond its producer's API. A *broker.Broker hands
// it out through its one hatch, Seams (internal/protocol's Admin returns
// it), whose argument no other module can name.
type Broker interface {
	// Queues returns the names of every queue that was ever enqueued to
	// (and not forgotten), unsorted, including names delayq did not write.
	Queues(ctx context.Context) ([]string, error)
	// Shards returns the physical queues of queue, shard k at index k: one
	// (the queue itself) unless it was declared with more. Its keys are
	// ns:{Name}:scheduled and so on.
	Shards(ctx context.Context, queue string) ([]Shard, error)
	// History returns the per-minute history of each queue from from to
	// to (both included, at most 1,441 minutes per queue), one slice per
	// queue in the order given; a minute without activity is zero but for
	// its Start. Bad queue names, to before from, or a span over the most
	// minutes give an error wrapping job.ErrInvalid.
	History(ctx context.Context, queues []string, from, to time.Time) ([][]Minute, error)
	// QueueMemory estimates what queue takes in Redis (it reads the
	// queue's stats first, for the types whose held jobs it measures); a
	// server that refuses MEMORY USAGE gives an error wrapping
	// ErrMemoryNotReadable.
	QueueMemory(ctx context.Context, queue string) (QueueMemory, error)
	// ServerMemory reads INFO memory of the server, or of every master of
	// a cluster; an error wraps ErrMemoryNotReadable when it does not
	// tell.
	ServerMemory(ctx context.Context) (ServerMemory, error)
	// EvictionPolicy returns the server's maxmemory-policy; where CONFIG
	// GET is refused, an error wrapping ErrConfigUnavailable.
	EvictionPolicy(ctx context.Context) (string, error)
	// Known reports whether queue is listed (used, and not forgotten).
	Known(ctx context.Context, queue string) (bool, error)
	// MustKnow returns nil when queue is listed, else an error wrapping
	// ErrUnknownQueue.
	MustKnow(ctx context.Context, queue string) error
	// Forget unlists an empty queue (ErrQueueNotEmpty if it holds
	// anything) and deletes its controls.
	Forget(ctx context.Context, queue string) error
	// ForgetIdle unlists the queues nobody has used for idle (at least
	// MinForgetIdle) and that hold nothing, and returns their names.
	ForgetIdle(ctx context.Context, idle time.Duration) ([]string, error)

	// FunctionLibrary returns the name and the Lua code of this build's
	// Redis function library (Options.Functions of package broker).
	FunctionLibrary() (name, code string)
	// LoadFunctions loads this build's function library into the broker's
	// server (into every master of a cluster) and returns its name; a
	// library loaded already is kept. It needs a user allowed FUNCTION
	// LOAD, and Redis 7.
	LoadFunctions(ctx context.Context) (string, error)
	// FunctionLibraries lists the delayq function libraries loaded on the
	// broker's server (on every master of a cluster), sorted by name, and
	// how many masters were asked. It needs a user allowed FUNCTION LIST.
	FunctionLibraries(ctx context.Context) ([]FunctionLibraryStatus, int, error)
	// DeleteFunctions deletes the delayq function library name from the
	// broker's server (from every master of a cluster).
	DeleteFunctions(ctx context.Context, name string) error
}

// Shard is one physical queue of a queue, as Broker.Shards lists it.
type Shard struct {
	Name string // "q" for an unsharded queue, "q#k" or "q#k.s" for shard k
	Slot int    // the Redis Cluster hash slot of its keys
}

// FunctionLibraryPrefix starts the name of every library LoadFunctions
// loads; the rest is the version, a hash of the scripts.
const FunctionLibraryPrefix = "delayq_"

// FunctionLibraryStatus is one delayq function library on a server, as
// FunctionLibraries lists it.
type FunctionLibraryStatus struct {
	Name    string // FunctionLibraryPrefix and its version
	Current bool   // this build's library
	Masters int    // how many masters hold it (1 on a single server)
}

// Minute is one minute of a queue's history.
type Minute struct {
	Start       time.Time     // the minute's first instant, server clock
	Claimed     int64         // jobs handed to workers
	Done        int64         // jobs whose handler succeeded (acked)
	Failed      int64         // failed attempts that were retried, expired leases included
	Dead        int64         // jobs moved to the dead-letter store
	LatenessSum time.Duration // sum over Claimed of claim time − ready time
	LatenessMax time.Duration // the largest of those
	// RateHeld counts the due jobs a claim held for want of their type's
	// rate-limit token (each once, when it was held; its lateness counts
	// from its ready time when it is claimed).
	RateHeld int64
}

// Handled is how many attempts ended in the minute: done, failed or dead.
func (m Minute) Handled() int64 { return m.Done + m.Failed + m.Dead }

// MeanLateness is the mean claim time − ready time of the minute's claims,
// or 0 when there were none.
func (m Minute) MeanLateness() time.Duration {
	if m.Claimed == 0 {
		return 0
	}
	return m.LatenessSum / time.Duration(m.Claimed)
}

// ErrMemoryNotReadable is wrapped by the errors of QueueMemory and
// ServerMemory when the server does not tell: it refused the command (an
// ACL user without it, a managed Redis that hides it), or the broker does
// not ask (ServerMemory with Options.Functions, whose user is given no
// INFO).
var ErrMemoryNotReadable = errors.New("broker: memory not readable")

// QueueMemory is what the keys of one queue take in Redis, estimated.
type QueueMemory struct {
	Bytes int64 // the sum of MEMORY USAGE of its keys
	Keys  int   // keys that exist, of those measured
}

// ServerMemory is what INFO memory says of the server, summed over the
// masters of a cluster.
type ServerMemory struct {
	Used   int64  // used_memory, bytes
	Max    int64  // maxmemory, bytes; 0: no limit
	Policy string // maxmemory_policy (of the first master read)
	Nodes  int    // servers summed
}

// ErrConfigUnavailable is wrapped by EvictionPolicy when the server does
// not allow CONFIG GET.
var ErrConfigUnavailable = errors.New("broker: server configuration cannot be read")

// EvictionSafe reports whether a maxmemory-policy keeps delayq's keys:
// delayq sets no TTLs on them, so "noeviction" and the volatile-* policies
// never evict them (writes fail with an out-of-memory error instead, and no
// job is lost), while the allkeys-* policies may drop jobs silently.
func EvictionSafe(policy string) bool {
	switch policy {
	case "noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl":
		return true
	}
	return false
}

// ErrUnknownQueue: the queue was never used in the namespace (nothing was
// enqueued to it, and no operator created it), so an operator's action on
// it is refused rather than creating it: it is likely a typo.
var ErrUnknownQueue = errors.New("broker: unknown queue")

// ErrQueueNotEmpty: Forget found jobs, dead records or remembered unique ids
// in the queue; the error names them. Nothing was changed.
var ErrQueueNotEmpty = errors.New("broker: queue not empty")
