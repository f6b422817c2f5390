package redistest

import "testing"

// TopologyAddrs returns the addresses a client of the shared server starts
// from, starting the server if needed: every node of the [Cluster], the
// three Sentinels of the [Sentinel] setup (which monitor [SentinelMaster]),
// or the one server, as [Topology] says. Tests that connect a subprocess to
// the shared topology (a command-line tool, say) pass these on.
func TopologyAddrs(t testing.TB) []string {
	t.Helper()
	s := getShared(t)
	switch {
	case s.cluster != nil:
		return s.cluster.Addrs()
	case s.sentinel != nil:
		return s.sentinel.SentinelAddrs()
	}
	return []string{s.opts.Addr}
}
