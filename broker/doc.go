// Package broker stores delayed jobs in Redis and moves them through their
// states with atomic Lua scripts.
//
// It is the only package that talks to Redis. Every key of one queue carries
// the queue's hash tag, so a queue lives in one Redis Cluster slot and each
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
//	ns:queues          SET   known queue names
//
// Time is the Redis server's: scripts read TIME, so workers whose clocks
// disagree still agree on when a job is due. Each state change after a claim
// carries the fencing token the claim handed out; a worker whose lease was
// lost (reaped and handed to another) changes nothing and gets an error
// wrapping [ErrLeaseLost].
//
// # Inspection
//
// Operators' tools read the queues without changing them: [Broker.Queues],
// [Broker.Stats] and [Broker.AllStats] give counts (scheduled, due,
// processing, dead), the oldest due job's lateness and the next ready time
// in O(log N) per queue; [Broker.ScheduledPage] and [Broker.ProcessingPage]
// page through jobs by ready time or lease deadline with a cursor;
// [Broker.Job] finds one job in any state. [Broker.EvictionPolicy] reads the
// server's maxmemory-policy, which must not evict jobs.
package broker
