package redistest

import (
	"strings"
	"testing"
)

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

// TopologyURL is the URL of the shared server in the scheme its topology
// (TopologyEnv) needs, as the delayq command reads it: redis+cluster://
// with every node, redis+sentinel:// with the Sentinels and the master's
// name, else the server's own. userinfo ("user:password@") goes in front of
// the addresses.
func TopologyURL(t testing.TB, userinfo string) string {
	t.Helper()
	addrs := strings.Join(TopologyAddrs(t), ",")
	switch topo := Topology(); topo {
	case "cluster":
		return "redis+cluster://" + userinfo + addrs
	case "sentinel":
		return "redis+sentinel://" + userinfo + addrs + "/" + SentinelMaster
	case "single":
		if userinfo == "" {
			return URL(t)
		}
		return "redis://" + userinfo + addrs + "/0"
	default:
		t.Fatalf("redistest: topology %q", topo)
		return ""
	}
}
