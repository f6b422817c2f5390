// Package fleet is the registry of a namespace's running processes:
// workers, periodic schedulers, outbox relays, or any process of the
// application. Each registers what it is (role, host, pid, version, the
// queues it serves and at what concurrency, the job types it handles),
// when it started, when it last recorded itself, and the jobs it holds,
// with an expiry; `delayq workers ls`, the dashboard's processes page and
// the "no live process" warnings of `delayq stats` and the queue page read
// it with [List].
//
//	reg, err := fleet.New(rdb, ns, fleet.Process{
//		Role:   fleet.RoleWorker,
//		Queues: []fleet.Queue{{Name: "orders", Concurrency: 20}},
//		Types:  []string{"order.cancel"},
//	}, fleet.Options{Held: func() []fleet.HeldJob { ... }})
//	go reg.Run(ctx) // beats every TTL/3; deregisters when ctx is done
//
// worker.Worker, periodic.Scheduler and outbox.Relay register themselves
// while they run (unless their ProcessTTL is negative).
//
// # Keys and cost
//
// The registry's keys are its own: the broker's scripts never touch them,
// and fleet writes them with plain commands on the client it is given
// (in delayq's own packages, the broker's Client), no script. A process's record is a string ns:{:fleet}:proc:<id> (JSON) that expires
// TTL after its last heartbeat, and the sorted set ns:{:fleet}:procs holds
// every id scored by when it expires. Both carry the hash tag {:fleet}, so
// on a Redis Cluster they live in one slot and a heartbeat is one MULTI: the
// record, its score, the removal of the ids whose registration ran out (a
// killed process's), and the index's own expiry, set to the latest
// registration it holds: once the last process stopped beating and its TTL
// passed, no key of the registry is left. A heartbeat costs O(log N) for N processes; List
// reads the ids still live by the server's clock and their records, at
// most [MaxList]. Time is the Redis server's TIME, so processes with skewed
// clocks agree on who is live.
//
// A process killed with SIGKILL stays listed until its TTL after its last
// heartbeat (DefaultTTL, 15 s), then is gone; the jobs it held stay
// processing until their lease runs out, and a queue holding jobs that no
// live process serves is flagged by the tools.
package fleet
