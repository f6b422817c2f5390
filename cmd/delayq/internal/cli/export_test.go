package cli

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/redistest"
)

// TopologyURL is the URL of the shared server in the scheme its topology
// ($DELAYQ_TEST_TOPOLOGY) needs: redis+cluster:// with every node,
// redis+sentinel:// with the Sentinels and the master's name, else the
// server's own. userinfo ("user:password@") goes in front of the addresses.
func TopologyURL(t testing.TB, userinfo string) string {
	t.Helper()
	addrs := strings.Join(redistest.TopologyAddrs(t), ",")
	switch topo := redistest.Topology(); topo {
	case "cluster":
		return "redis+cluster://" + userinfo + addrs
	case "sentinel":
		return "redis+sentinel://" + userinfo + addrs + "/" + redistest.SentinelMaster
	case "single":
		if userinfo == "" {
			return redistest.URL(t)
		}
		return "redis://" + userinfo + addrs + "/0"
	default:
		t.Fatalf("topology %q", topo)
		return ""
	}
}
