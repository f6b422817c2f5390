package keyspace

// FleetKeys are the keys of a namespace's process registry (package
// fleet). They share the hash tag {:fleet}, which no queue's keys carry (a
// queue name has no ':'), so they live in one Cluster slot and a heartbeat
// changes them in one MULTI.
type FleetKeys struct {
	Index string // ZSET process id -> when its registration expires (ms, server clock)
	Proc  string // prefix of the STRINGs Proc + process id -> the process's record (JSON), expiring with it
}

// Fleet returns the process registry's keys of namespace ns.
func Fleet(ns string) FleetKeys {
	p := ns + ":{:fleet}:"
	return FleetKeys{Index: p + "procs", Proc: p + "proc:"}
}
