// Package broker stores delayed jobs in Redis and moves them through their
// states with atomic Lua scripts.
//
// # Using it
//
// A [Broker] wraps a go-redis v9 client: a single server, a Sentinel
// failover client or a Cluster client. Producers enqueue through it, workers
// claim from it; a program makes one and shares it.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	b, err := broker.New(rdb, broker.Options{}) // keys under "delayq:"
//
//	// Enqueue through a job type (package job): ready in 30 minutes.
//	_, err = CancelUnpaid.Enqueue(ctx, b, Order{ID: "1001"}, job.ID("order-1001"), job.In(30*time.Minute))
//
//	c, err := b.Cancel(ctx, "default", "order-1001")        // removed, or asked to stop (c.Running)
//	_, err = b.Reschedule(ctx, "default", "order-1001", at) // move it
//	st, err := b.Stats(ctx, "default")                      // counts and lateness: st[0]
//
// New reads the server's version once (INFO server; every master of a
// cluster) and refuses a server older than Redis 6.2.0
// (for ZMSCORE and ZADD GT; every Valkey passes) with an error wrapping
// [ErrServerTooOld]. A server that hides INFO is asked with a one-line
// script whether it knows ZMSCORE instead; one that answers neither, or
// cannot be reached, is not refused.
//
// Its methods are those of producers (Enqueue; Cancel and Reschedule of a
// job that has not started) and of operators (the inspection methods
// below). The worker's side, claiming jobs under a lease and recording
// their outcomes, is not part of this API: package worker speaks it
// through an internal protocol, so that it can change without breaking
// users. Dead letters are read, redriven and removed through package
// deadletter (deadletter.New(b)), the one API of dead letters, which the
// broker serves through the same kind of internal seam.
//
// # Defaults and limits
//
// Options' defaults are stated on their fields: namespace "delayq",
// payloads up to 1 MiB, 10,000 dead records per queue kept for 30 days,
// a 1 s wait for replicas, calls remembered for 2 minutes; a batch's
// record is kept 7 days after its callbacks. Calls refuse, with an error
// wrapping job.ErrInvalid that names the limit: a page of more than 1,000
// jobs (Page), of more than 1,000 batches
// (Batches) or of more than 1,000 keys (HeldKeys), and a queue of more
// than 256 shards (DeclareQueue). A dead record keeps the first 64 KiB of
// its error.
//
// # Errors
//
// Errors wrap sentinels, to test with errors.Is: [ErrDuplicate] (another
// call stored a job with that id, still pending), [ErrNotFound],
// [ErrInProgress] (a worker holds the job, so it can no longer be moved
// or replaced; a cancel asks it to stop instead), [ErrPayloadTooLarge],
// and [ErrLeaseLost], which workers see when fencing refuses a change. Bad
// input (an id, queue name, delay or option) gives an error wrapping
// job.ErrInvalid, and nothing is written.
//
// Nil from a call that changes jobs means this call made the change. A
// call whose reply was lost ([ErrOutcomeUnknown]) or that the replicas did
// not confirm ([ErrNotReplicated]) fails with a [*CallError]; [Resend]
// sends that very call again, with the call id it was made with, and
// answers with its first outcome, even after the job ran and ended:
//
//	err := b.Enqueue(ctx, env)
//	if errors.Is(err, broker.ErrOutcomeUnknown) {
//		err = broker.Resend(ctx, err)
//	}
//
// docs/guarantees.md ("What an answer means") has the whole story.
//
// # Keys
//
// It runs every script and is the only package that reads or writes the
// keys of queues listed below; packages fleet, periodic and outbox keep keys
// of their own (docs/architecture.md, "Key layout"), written with plain
// commands on the client that [Broker.Client] returns. Every key of one
// queue carries the queue's hash tag, so a queue lives in one Redis Cluster slot and each
// script touches only the keys it declares:
//
//	ns:{q}:scheduled   ZSET  id -> ready time (ms)
//	ns:{q}:processing  ZSET  id -> lease deadline (ms)
//	ns:{q}:jobs        HASH  id -> envelope
//	ns:{q}:attempts    HASH  id -> attempts spent
//	ns:{q}:leases      HASH  id -> fencing token of the live lease
//	ns:{q}:seq         STRING   last fencing token handed out
//	ns:{q}:dead        HASH  id -> dead record
//	ns:{q}:dead:index  ZSET  id -> died-at (ms)
//	ns:{q}:c:<call>    STRING   a call's first answer, for the resend window
//	ns:queues          SET   known queue names
//	ns:shards          HASH  queue -> number of shards
//
// A queue declared with n > 1 shards ([Broker.DeclareQueue]) is stored as
// n physical queues "q#0" ... (each its own hash tag, so its own cluster
// slot); a job's shard is a hash of its id. Every method takes the queue's
// own name and is correct on a sharded queue: methods that name a job go to
// its shard, and those that read or change a queue as a whole visit every
// shard and merge what they find (Stats sums, the pages and
// History merge, DeadCap is shared). See docs/scaling.md.
//
// # Time and fencing
//
// Time is the Redis server's: scripts read TIME, so workers whose clocks
// disagree still agree on when a job is due. Each state change after a claim
// carries the fencing token the claim handed out; a worker whose lease was
// lost (reaped and handed to another) changes nothing and gets an error
// wrapping [ErrLeaseLost].
//
// Configure Redis as a store, not a cache: maxmemory-policy noeviction (an
// evicted key is a lost job), and appendonly yes if jobs must survive a
// restart of Redis.
//
// # Redis users and functions
//
// `delayq acl` prints the ACL rules of a Redis user limited to one namespace.
// They grant EVAL and EVALSHA, which run any code: where namespaces share a
// server, an administrator loads the scripts once as a Redis 7 function
// library (`delayq admin load-functions`), the brokers run
// with Options.Functions (FCALL and FCALL_RO of that library) and their
// user gets those of `delayq acl --functions`, which allow no code of its own. The
// library is named after a hash of the scripts, so versions coexist during
// a rolling deploy; a missing one gives errors wrapping
// [ErrFunctionsNotLoaded]. See docs/security.md.
//
// # Inspection
//
// Operators' tools read the queues without changing them: [Broker.Stats]
// (of the queues named, or of every queue with none named; a queue that
// cannot be read is named in a [*QueueErrors] that comes with the others'
// stats) gives counts (scheduled, due, processing, dead), the oldest due job's lateness
// and the next ready time in O(log N) per queue; [Broker.Page]
// pages through jobs by ready time or lease deadline with a cursor;
// [Broker.Job] finds one job in any state.
//
// The client may be a single node, a *redis.ClusterClient or a Sentinel
// failover client. Options.WaitReplicas makes every change wait until
// replicas have it, so that a failover loses no acknowledged job.
package broker
