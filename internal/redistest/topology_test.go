package redistest_test

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redistest"
)

// TopologyAddrs leads a client of its own to the same data as New's client:
// a key written through New's client is read through a client started from
// the addresses alone, of the kind the topology needs.
func TestTopologyAddrs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	addrs := redistest.TopologyAddrs(t)
	var own redis.UniversalClient
	switch topo := redistest.Topology(); topo {
	case "single":
		if !slices.Equal(addrs, []string{redistest.Addr(t)}) {
			t.Fatalf("TopologyAddrs = %q, want [Addr] = [%q]", addrs, redistest.Addr(t))
		}
		own = redis.NewClient(&redis.Options{Addr: addrs[0]})
	case "cluster":
		if len(addrs) != 6 {
			t.Fatalf("TopologyAddrs = %q, want the six nodes", addrs)
		}
		own = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	case "sentinel":
		if len(addrs) != 3 {
			t.Fatalf("TopologyAddrs = %q, want the three Sentinels", addrs)
		}
		own = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: addrs})
	default:
		t.Fatalf("topology %q", topo)
	}
	defer own.Close()
	key := ns + ":probe"
	if err := rdb.Set(ctx, key, "here", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := own.Get(ctx, key).Result(); err != nil || got != "here" {
		t.Fatalf("GET %s through a client of TopologyAddrs %q: %q, %v", key, addrs, got, err)
	}
}
