package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

const (
	// ClusterNodeTimeout is the cluster-node-timeout of the nodes that
	// StartCluster starts: a dead master's replica takes over about two of
	// these after the master stops answering.
	ClusterNodeTimeout = time.Second

	// clusterMasters is how many masters a Cluster has; each has one replica.
	clusterMasters = 3

	// clusterReadyTimeout bounds the wait for a new or changed cluster to
	// become healthy.
	clusterReadyTimeout = 60 * time.Second
)

// Cluster is a Redis Cluster of three masters with one replica each, run
// from redis-server on free 127.0.0.1 ports in a temporary directory, with
// persistence off. Its nodes are [Server]s, so a test can Kill a master and
// Restart it (it comes back as a replica of the node that took over).
type Cluster struct {
	nodes []*Server
}

// StartCluster starts a cluster for the test and stops it at cleanup: six
// nodes, joined with "redis-cli --cluster create ... --cluster-replicas 1",
// and it returns once every node reports "cluster_state:ok", all 16384
// slots are served and every master has an online replica. It fails the
// test if redis-server or redis-cli is not on PATH or the cluster does not
// come up within a minute.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startCluster(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: start cluster: %v", err)
	}
	t.Cleanup(c.stop) // runs before t.TempDir's removal, which was registered first
	return c
}

func startCluster(dir string) (*Cluster, error) {
	bin, err := ServerBinary()
	if err != nil {
		return nil, fmt.Errorf("a cluster needs a server binary: %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("a cluster needs redis-cli on PATH: %w", err)
	}
	c := &Cluster{}
	timeout := strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10)
	for i := range 2 * clusterMasters {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			c.stop()
			return nil, err
		}
		s, err := startServer(bin, nodeDir, func(port, bus int) []string {
			return serverArgs(port, nodeDir, []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", timeout,
				"--cluster-port", strconv.Itoa(bus),
				// A replica takes over however long it was cut off.
				"--cluster-replica-validity-factor", "0",
			})
		})
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := c.waitHealthy(ctx, true); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// stop kills every node.
func (c *Cluster) stop() {
	for _, s := range c.nodes {
		s.Kill()
	}
}

// Nodes returns the six nodes, masters and replicas, in a fixed order.
func (c *Cluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Addrs returns the "127.0.0.1:port" of every node.
func (c *Cluster) Addrs() []string { return addrs(c.nodes) }

// addrs returns the "127.0.0.1:port" of each server.
func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}

// Options returns client options with every node as a seed.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// Client returns a new cluster client, closed at the test's cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// node returns the node listening on addr, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// Masters returns the nodes that serve slots now, ordered by their first
// slot, as seen by a running node.
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	slots, err := c.slots(context.Background())
	if err != nil {
		t.Fatalf("redistest: cluster slots: %v", err)
	}
	var out []*Server
	for _, r := range slots {
		if s := c.node(r.Nodes[0].Addr); s != nil && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// MasterOf returns the node that serves key's slot now.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	ctx := context.Background()
	slots, err := c.slots(ctx)
	if err != nil {
		t.Fatalf("redistest: cluster slots: %v", err)
	}
	slot := Slot(key)
	for _, r := range slots {
		if slot >= r.Start && slot <= r.End {
			if s := c.node(r.Nodes[0].Addr); s != nil {
				return s
			}
		}
	}
	t.Fatalf("redistest: no node serves slot %d of key %q", slot, key)
	return nil
}

// ReplicaOf returns a running replica of master, as the master reports it.
func (c *Cluster) ReplicaOf(t testing.TB, master *Server) *Server {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("redistest: replication info of %s: %v", master.Addr(), err)
	}
	f := infoFields(info)
	for i := 0; ; i++ {
		v, ok := f["slave"+strconv.Itoa(i)]
		if !ok {
			break
		}
		var ip, port string
		for kv := range strings.SplitSeq(v, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				switch k {
				case "ip":
					ip = val
				case "port":
					port = val
				}
			}
		}
		if s := c.node(ip + ":" + port); s != nil && s.running() {
			return s
		}
	}
	t.Fatalf("redistest: master %s has no running replica", master.Addr())
	return nil
}

// slots asks the first running node for CLUSTER SLOTS.
func (c *Cluster) slots(ctx context.Context) ([]redis.ClusterSlot, error) {
	var lastErr error = errors.New("no node is running")
	for _, s := range c.nodes {
		if !s.running() {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		slots, err := rdb.ClusterSlots(ctx).Result()
		_ = rdb.Close()
		if err == nil {
			return slots, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// WaitHealthy waits until every running node reports "cluster_state:ok"
// and knows all 16384 slots as served, and, when replicas is true, every
// master has an online replica. It fails the test after a minute. Call it
// after killing or restarting nodes.
func (c *Cluster) WaitHealthy(t testing.TB, replicas bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx, replicas); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

func (c *Cluster) waitHealthy(ctx context.Context, replicas bool) error {
	var last error
	for {
		if last = c.healthy(ctx, replicas); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %w", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// healthy says what is still wrong with the cluster, or nil.
func (c *Cluster) healthy(ctx context.Context, replicas bool) error {
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	up := map[string]bool{}
	for _, s := range c.nodes {
		up[s.Addr()] = s.running()
	}
	for _, s := range c.nodes {
		if !s.running() {
			continue
		}
		wg.Go(func() {
			if p := nodeProblem(ctx, s.Addr(), up, replicas); p != "" {
				mu.Lock()
				problems = append(problems, s.Addr()+": "+p)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(problems) > 0 {
		slices.Sort(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// nodeProblem checks one node: "" when it is healthy. up tells which
// nodes are running.
func nodeProblem(ctx context.Context, addr string, up map[string]bool, replicas bool) string {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return err.Error()
	}
	fields := infoFields(info)
	if fields["cluster_state"] != "ok" || fields["cluster_slots_ok"] != "16384" {
		return fmt.Sprintf("cluster_state:%s cluster_slots_ok:%s", fields["cluster_state"], fields["cluster_slots_ok"])
	}
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return err.Error()
	}
	for _, r := range slots {
		if len(r.Nodes) == 0 || !up[r.Nodes[0].Addr] {
			return fmt.Sprintf("slots %d-%d are assigned to a stopped node", r.Start, r.End)
		}
	}
	if !replicas {
		return ""
	}
	repl, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return err.Error()
	}
	fields = infoFields(repl)
	switch fields["role"] {
	case "master":
		if fields["connected_slaves"] == "0" || !strings.Contains(fields["slave0"], "state=online") {
			return "master without an online replica"
		}
	case "slave":
		if fields["master_link_status"] != "up" {
			return "replica not linked to its master"
		}
	}
	return ""
}

// infoFields parses "key:value" lines of an INFO-style reply.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key when it has none, modulo 16384.
func Slot(key string) int { return keyspace.Slot(key) }
