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
//	ns:shards          HASH  queue -> number of shards
//
// A queue declared with n > 1 shards ([Broker.DeclareQueue]) is stored as
// n physical queues "q#0" ... (each its own hash tag, so its own cluster
// slot); a job's shard is a hash of its id. Every method takes the queue's
// own name: methods that name a job go to its shard, Claim, Reap, Stats and
// the dead-letter methods cover all shards. See docs/scaling.md.
//
// Time is the Redis server's: scripts read TIME, so workers whose clocks
// disagree still agree on when a job is due. Each state change after a claim
// carries the fencing token the claim handed out; a worker whose lease was
// lost (reaped and handed to another) changes nothing and gets an error
// wrapping [ErrLeaseLost].
//
// The client may be a single node, a *redis.ClusterClient or a Sentinel
// failover client. Options.WaitReplicas makes every change wait until
// replicas have it, so that a failover loses no acknowledged job.
package broker
