// Package fleet is the registry of a namespace's running processes:
// workers, periodic schedulers and outbox relays. Each registers what it
// is (role, host, pid, version, the queues it serves and at what
// concurrency, the job types it handles), when it started, when it last
// recorded itself, and the jobs it holds, with an expiry; `delayq workers
// ls`, the dashboard's processes page and the "no live process" warnings
// of `delayq stats` and the queue page read it with [List], and
// [ServingCounts] feeds the delayq.queue.processes gauge.
//
//	snap, err := fleet.List(ctx, b.Client(), b.Namespace())
//	for _, p := range snap.Serving("orders") {
//		fmt.Println(p.Role, p.Host, p.PID, p.Held)
//	}
//
// worker.Worker, periodic.Scheduler and outbox.Relay register themselves
// while they run (unless their ProcessTTL is negative), beating every
// third of their ProcessTTL (default 15 s, at least 100 ms).
//
// # Keys and cost
//
// The registry's keys are its own: the broker's scripts never touch them,
// and they are written with plain commands on the client a process was
// given (the broker's Client), no script. A process's record is a string
// ns:{:fleet}:proc:<id> (JSON) that expires TTL after its last heartbeat,
// and the sorted set ns:{:fleet}:procs holds every id scored by when it
// expires. Both carry the hash tag {:fleet}, so on a Redis Cluster they
// live in one slot and a heartbeat is one MULTI: the record, its score,
// the removal of the ids whose registration ran out (a killed process's),
// and the index's own expiry, set to the latest registration it holds:
// once the last process stopped beating and its TTL passed, no key of the
// registry is left. A heartbeat costs O(log N) for N processes; List reads
// the ids still live by the server's clock and their records, at most
// 1,000 (Snapshot.More counts the others). A record lists at most 100 of
// the jobs its process holds by id (Process.HeldJobs; Process.Held counts
// them all). Time is the Redis server's TIME, so processes with skewed
// clocks agree on who is live.
//
// A process killed with SIGKILL stays listed until its TTL after its last
// heartbeat (15 s by default), then is gone; the jobs it held stay
// processing until their lease runs out, and a queue holding jobs that no
// live process serves is flagged by the tools.
package fleet
