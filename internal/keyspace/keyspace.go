// Package keyspace is delayq's key layout in Redis and the routing of a
// user's queue to the physical queues (shards) that store it.
//
// Every key of a physical queue carries its name as the hash tag,
// ns:{name}:..., so that a physical queue lives in one Redis Cluster slot
// and a script touches only keys of that slot. A queue declared with n > 1
// shards is stored as n physical queues "q#0" ... "q#n-1" (see [ShardName]);
// a job's shard is FNV-1a(id) mod n.
//
// The only way to the keys of a physical queue is a [Shard], and the only
// way to a Shard is a [Queue] that a [Router] resolved: by routing a job id
// to its shard ([Queue.Route]) or by fanning out to every shard
// ([Queue.Shards]). No code can build keys from a user's queue name and
// so forget that the queue may be sharded.
//
// It names the keys of packages fleet, periodic and outbox too (each
// under a hash tag or name no queue can have), so that every key of a
// namespace is named here.
//
// The package knows no Redis client: a Router reads and stores shard
// counts through the [Counts] its owner gives it.
package keyspace

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// EncodingField is the one field of Keys.Attempts, Keys.Leases,
// Keys.Running and a queue's keyrun hash that is no job id nor flow-control
// key ('{' is refused in both): the claim keeps it there, with a long
// value, so that Redis keeps these hashes in their hashtable encoding (O(1)
// per field) instead of a listpack (O(n)), and the hashes stay once their
// jobs are gone. Scripts name it HASHTABLE_FIELD (prelude.lua).
const EncodingField = "{encoding}"

// Keys are the Redis keys of one physical queue.
type Keys struct {
	Scheduled  string // ZSET id -> ready time (ms)
	Processing string // ZSET id -> lease deadline (ms)
	Jobs       string // HASH id -> envelope
	Attempts   string // HASH id -> attempts spent, and EncodingField
	Leases     string // HASH id -> fencing token of the live lease, and EncodingField
	Seq        string // STRING: the last fencing token handed out
	Dead       string // HASH id -> dead record
	DeadIndex  string // ZSET id -> died-at (ms)
	Trimmed    string // LIST of dead records trimmed by the cap or by age, kept for the workers' hook: "<cap|age>\n<died ms>\n<trimmed ms>\n<record>"
	Unique     string // ZSET id -> remembered until (ms): unique jobs that ended
	Counts     string // HASH counter -> n: expired_dropped, dead_trimmed_cap, dead_trimmed_age, dead_trimmed_unarchived; dead_trim_warned -> ms of the last warning of trims by the cap
	Controls   string // HASH of the flow controls: "*" -> paused at (the queue), "t:<type>" -> paused at (a type), "r" / "r:<type>" -> rate limit "count/per_ms/burst/shards", "c" / "c:<type>" -> concurrency cap "share/total"
	Rate       string // HASH "*" / "<type>" -> GCRA theoretical arrival time (ms) of a rate limit
	Parked     string // ZSET id -> ready ms: due jobs of paused types, set aside by claim
	Cancels    string // HASH id -> fencing token of a running job asked to stop (Broker.Cancel)
	Running    string // HASH id -> type ("*" for the queue's cap only): jobs leased under a concurrency cap
	Batched    string // HASH id -> "<batch id>\n<s|d>": endings of batch members not yet counted by their batch (see BatchKeys)
	Progress   string // HASH id -> "<ms>\n<fraction>\n<message>": the last progress a running job reported (job.ReportProgress)
	Done       string // prefix of the STRINGs of retained succeeded jobs (Done + id -> "<finished ms>\n<record>"), each expiring with its retention
	Held       string // prefix of the per-type ZSETs id -> ready ms: due jobs of a type at its concurrency cap or out of rate-limit tokens, set aside by claim (Held + type)
	Window     string // prefix of the ZSETs fencing token -> claim ms: the log of a strict rate limit's window (Window + "*" for the queue, Window + type), each expiring a window after its last claim
	Hist       string // prefix of the per-minute history hashes: Hist + minute
	Workers    string // prefix of the workers' call records: Workers + worker id (HASH lane -> last call)
	Calls      string // prefix of the producers' and operators' call records: Calls + call id -> STRING, the call's first outcome, expiring after the broker's resend window
	Wake       string // Pub/Sub channel of the user's queue (shared by its shards), not a key
	Cancel     string // Pub/Sub channel of cancel notices for running jobs of the user's queue, not a key
}

func newKeys(ns, physical, queue string) Keys {
	p := ns + ":{" + physical + "}:"
	return Keys{
		Scheduled:  p + "scheduled",
		Processing: p + "processing",
		Jobs:       p + "jobs",
		Attempts:   p + "attempts",
		Leases:     p + "leases",
		Seq:        p + "seq",
		Dead:       p + "dead",
		DeadIndex:  p + "dead:index",
		Trimmed:    p + "dead:trimmed",
		Unique:     p + "unique",
		Counts:     p + "counts",
		Controls:   p + "controls",
		Rate:       p + "rate",
		Parked:     p + "parked",
		Cancels:    p + "cancels",
		Running:    p + "running",
		Batched:    p + "batched",
		Progress:   p + "progress",
		Done:       p + "done:",
		Held:       p + "held:",
		Window:     p + "window:",
		Hist:       p + "hist:",
		Workers:    p + "w:",
		Calls:      p + "c:",
		Wake:       WakeChannel(ns, queue),
		Cancel:     CancelChannel(ns, queue),
	}
}

// JobKeys lists the keys of k that hold jobs, dead records, remembered
// unique ids, counters or pauses (not the held jobs of capped types, whose
// keys are named by type, nor the history, which expires by itself, nor the
// fencing counter, which is never deleted).
func (k Keys) JobKeys() []string {
	return []string{k.Scheduled, k.Processing, k.Jobs, k.Attempts, k.Leases, k.Dead, k.DeadIndex, k.Trimmed, k.Unique, k.Counts, k.Controls, k.Rate, k.Parked, k.Cancels, k.Running, k.Batched, k.Progress}
}

// WakeChannel is the Pub/Sub channel on which the workers of queue are
// woken when a job becomes its earliest.
func WakeChannel(ns, queue string) string { return ns + ":{" + queue + "}:wake" }

// CancelChannel is the Pub/Sub channel on which the workers of queue are
// told to cancel a running job: the message is "<id>\n<token>".
func CancelChannel(ns, queue string) string { return ns + ":{" + queue + "}:cancel" }

// BatchKeys are the keys of one batch, under the batch's own hash tag
// ns:batch:{<id>}:..., so that one script sees all of them whatever the
// queues of its members.
type BatchKeys struct {
	Meta    string // HASH: total, sealed, succeeded, dead, created, the callbacks and whether they fired
	Members string // HASH "<queue>\n<id>" -> p (added), s (succeeded), d (dead), x (gone: cancelled before it ran, or expired and dropped), o (a next job taken back out: its parent did not succeed)
	Next    string // HASH member -> its next jobs counted into the batch (job.Then, job.Next), members joined by '\t'
}

// Batch returns the keys of batch id.
func Batch(ns, id string) BatchKeys {
	p := ns + ":batch:{" + id + "}:"
	return BatchKeys{Meta: p + "meta", Members: p + "members", Next: p + "next"}
}

// BatchesKey is the ZSET batch id -> created ms, for listing batches.
func BatchesKey(ns string) string { return ns + ":batches" }

// QueuesKey is the SET of known queue names.
func QueuesKey(ns string) string { return ns + ":queues" }

// ShardsKey is the HASH queue -> shard count.
func ShardsKey(ns string) string { return ns + ":shards" }

// QueuesSeenKey is the HASH queue -> ms since the epoch: when a producer or
// worker last listed the queue (Router.Place, Router.Touch), for
// forgetting idle queues.
func QueuesSeenKey(ns string) string { return ns + ":queues:seen" }

// Shard is one physical queue of a user's queue. Its zero value is no
// shard; real ones come from a Queue.
type Shard struct {
	queue string // the user's queue
	name  string // the physical queue: the queue itself, or "q#k[.s]"
	index int
	// keys are shared by the copies of the shard (a Shard is copied into
	// every lease): a pointer keeps a Shard at 48 bytes, where the keys
	// are some 400. Two Shards of the same physical queue made apart
	// hold different pointers: compare Names, never Shards.
	keys *Keys
}

// Queue returns the name of the user's queue the shard belongs to.
func (s Shard) Queue() string { return s.queue }

// Name returns the physical queue's name, the hash tag of its keys.
func (s Shard) Name() string { return s.name }

// Index returns k for shard k of its queue (0 for an unsharded queue).
func (s Shard) Index() int { return s.index }

// Keys returns the shard's keys.
func (s Shard) Keys() Keys {
	if s.keys == nil {
		return Keys{}
	}
	return *s.keys
}

// Slot returns the Redis Cluster hash slot of the shard's keys.
func (s Shard) Slot() int { return Slot(s.name) }

// IsZero reports whether s is the zero Shard.
func (s Shard) IsZero() bool { return s.name == "" }

// Queue is a user's queue with its shards, as a Router resolved it.
type Queue struct {
	name   string
	shards []Shard
}

func newQueue(ns, name string, n int) Queue {
	q := Queue{name: name, shards: make([]Shard, n)}
	for k := range n {
		physical := name
		if n > 1 {
			physical = ShardName(name, k, n)
		}
		keys := newKeys(ns, physical, name)
		q.shards[k] = Shard{queue: name, name: physical, index: k, keys: &keys}
	}
	return q
}

// Name returns the queue's name.
func (q Queue) Name() string { return q.name }

// Shards returns every shard of the queue, shard k at index k. The slice
// is the queue's own: do not change it.
func (q Queue) Shards() []Shard { return q.shards }

// Sharded reports whether the queue has more than one shard.
func (q Queue) Sharded() bool { return len(q.shards) > 1 }

// Route returns the shard that holds the job with id.
func (q Queue) Route(id string) Shard { return Route(q.shards, id) }

// Route returns the shard of shards, all the shards of one queue, that
// holds the job with id: FNV-1a(id) mod len(shards).
func Route(shards []Shard, id string) Shard {
	if len(shards) == 1 {
		return shards[0]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return shards[h.Sum32()%uint32(len(shards))]
}

// Share splits total among the shards so that the parts add up to total:
// shard k gets total/n, and the first total%n shards one more. It is how a
// per-queue cap (the dead-letter cap) applies to a sharded queue.
func (q Queue) Share(k, total int) int {
	n := len(q.shards)
	part := total / n
	if k < total%n {
		part++
	}
	return part
}

// ClusterSlots is the number of Redis Cluster hash slots.
const ClusterSlots = 16384

// ShardName returns the name of shard k of n of queue: "q#k", or "q#k.s"
// for the smallest s >= 1 that puts its hash slot into the middle half of
// the k-th n-th of the slot space. A cluster made by redis-cli --cluster
// create gives each master one contiguous, equal range of slots, so n
// shards spread over m masters as evenly as n allows (one per master when
// n = m) instead of landing where their names happen to hash.
func ShardName(queue string, k, n int) string {
	base := queue + "#" + strconv.Itoa(k)
	from := k * ClusterSlots / n
	width := (k+1)*ClusterSlots/n - from
	lo, hi := from+width/4, from+width-width/4
	name := base
	for s := 1; s <= 1<<20; s++ {
		if sl := Slot(name); sl >= lo && sl < hi {
			return name
		}
		name = base + "." + strconv.Itoa(s)
	}
	return base // unreachable in practice: CRC16 covers every window
}

// Logical returns the user's queue of a physical queue name.
func Logical(physical string) string {
	if i := strings.IndexByte(physical, '#'); i >= 0 {
		return physical[:i]
	}
	return physical
}

// Slot returns the Redis Cluster hash slot of a key: CRC16 (XMODEM) of its
// hash tag (the part between the first '{' and the next '}', when that is
// not empty; else the whole key) modulo ClusterSlots.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % ClusterSlots
}

// Namespace returns ns, or DefaultNamespace when ns is empty, and what is
// wrong with it ("" when nothing is): the check every package that takes a
// namespace makes.
func Namespace(ns string) (string, string) {
	if ns == "" {
		return DefaultNamespace, ""
	}
	return ns, CheckNamespace(ns)
}

// CheckNamespace says what is wrong with a namespace (the prefix of every
// key), or "" when nothing is: at most 64 bytes of letters, digits and
// '._-:'.
func CheckNamespace(ns string) string {
	if len(ns) > 64 {
		return "namespace is " + strconv.Itoa(len(ns)) + " bytes long, the limit is 64"
	}
	for _, r := range ns {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == ':':
		default:
			return "namespace " + strconv.Quote(ns) + " contains " + strconv.QuoteRune(r) + "; allowed are letters, digits and '._-:'"
		}
	}
	return ""
}
