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
	// Paused: HASH schedule name -> its pause (JSON: when it was paused,
	// and when resumed; a resumed schedule's record says from when its
	// ticks run again).
	Paused string
	// Runs: HASH run-now job id (name@run:request) -> the request and
	// what became of it (JSON), kept until it expires.
	Runs string
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
		Paused:    p + "paused",
		Runs:      p + "runs",
	}
}
