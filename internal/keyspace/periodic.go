package keyspace

// PeriodicKeys are the keys of the periodic schedules of a namespace. They
// share the hash tag {:periodic}, which no queue's keys carry (a queue name
// has no ':'), so they live in one Cluster slot and can change together in
// one MULTI.
type PeriodicKeys struct {
	Schedules string // HASH schedule name -> its declaration and heartbeat (JSON)
	Last      string // ZSET schedule name -> time of the latest tick enqueued (ms)
	Outcomes  string // HASH schedule name -> outcome of its latest finished attempt (JSON)
	// Ticks: HASH tick job id (name@tick) -> "<expires ms> <queue>", the
	// queue the first scheduler to reach the tick chose for its job, kept
	// until it expires.
	Ticks string
	// Secret: STRING, the key with which schedulers sign their ticks' jobs
	// (an HMAC in a header) so that only those record outcomes.
	Secret string
}

// Periodic returns the periodic schedules' keys of namespace ns.
func Periodic(ns string) PeriodicKeys {
	p := ns + ":{:periodic}:"
	return PeriodicKeys{
		Schedules: p + "schedules",
		Last:      p + "last",
		Outcomes:  p + "outcomes",
		Ticks:     p + "ticks",
		Secret:    p + "secret",
	}
}
