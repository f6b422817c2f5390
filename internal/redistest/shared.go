package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

const (
	// maxNamespaceLen caps the length of a namespace returned by New.
	maxNamespaceLen = 60
	// cleanupTimeout bounds deleting one namespace at test cleanup.
	cleanupTimeout = 30 * time.Second
	// scanCount is the COUNT hint for SCAN and unlinkBatch the keys per UNLINK.
	scanCount   = 1000
	unlinkBatch = 500
)

// sharedServer is the server New, Addr and URL connect to.
type sharedServer struct {
	opts *redis.Options // template; copied for every client
	url  string

	proc *process             // redis-server started by this package, or nil
	dir  string               // its directory, removed by Main
	mini *miniredis.Miniredis // embedded fallback, or nil

	cluster  *Cluster  // TopologyEnv=cluster: the client is a cluster client
	sentinel *Sentinel // TopologyEnv=sentinel: the client is a failover client
}

// TopologyEnv names the environment variable that chooses what the shared
// server is: unset or "single" for one redis-server, "cluster" for a
// [Cluster] of three masters and three replicas, "sentinel" for a master,
// a replica and three Sentinels ([Sentinel]). [New] then returns a
// *redis.ClusterClient or a failover *redis.Client, and the test suite runs
// unchanged against that topology. The topology is started once per test
// binary, before REDIS_URL is looked at, and stopped by [Main].
const TopologyEnv = "DELAYQ_TEST_TOPOLOGY"

// Topology returns the shared server's topology as chosen by TopologyEnv:
// "single", "cluster" or "sentinel".
func Topology() string {
	switch t := os.Getenv(TopologyEnv); t {
	case "":
		return "single"
	default:
		return t
	}
}

var (
	sharedMu  sync.Mutex
	shared    *sharedServer
	sharedErr error // sticky: once starting failed, every caller fails alike
)

// errStopped is returned after Main has stopped the shared server.
var errStopped = errors.New("shared server already stopped by Main")

// getShared returns the shared server, starting it on first use, and fails
// t if it cannot be had.
func getShared(t testing.TB) *sharedServer {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = startShared(t)
	}
	if sharedErr != nil {
		t.Fatalf("redistest: %v", sharedErr)
	}
	return shared
}

// startShared picks the shared server: REDIS_URL, then the server binary
// ServerBinary names, then (unless DELAYQ_REQUIRE_REDIS=1 or ServerEnv is
// set) an embedded miniredis.
func startShared(t testing.TB) (*sharedServer, error) {
	t.Helper()
	switch topo := Topology(); topo {
	case "single":
	case "cluster", "sentinel":
		return startTopology(topo)
	default:
		return nil, fmt.Errorf("%s=%q: want single, cluster or sentinel", TopologyEnv, topo)
	}
	if u := os.Getenv("REDIS_URL"); u != "" {
		opts, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("parse REDIS_URL: %w", err)
		}
		return &sharedServer{opts: opts, url: u}, nil
	}

	bin, err := ServerBinary()
	if err != nil && serverChosen() {
		return nil, err
	}
	if err == nil {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return nil, err
		}
		p, port, err := launchFreePort(bin, dir, logFile(dir), nil, plainDial)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start shared server %s: %w", bin, err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return &sharedServer{
			opts: &redis.Options{Addr: addr},
			url:  "redis://" + addr + "/0",
			proc: p,
			dir:  dir,
		}, nil
	}

	if os.Getenv("DELAYQ_REQUIRE_REDIS") == "1" {
		return nil, fmt.Errorf("redis-server not found on PATH and DELAYQ_REQUIRE_REDIS=1 (install redis-server, set %s to a redis-server-compatible binary, or set REDIS_URL)", ServerEnv)
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("start embedded miniredis: %w", err)
	}
	t.Logf("redistest: REDIS_URL not set and redis-server not found on PATH; using embedded miniredis at %s as a fallback (set DELAYQ_REQUIRE_REDIS=1 to require a real server)", m.Addr())
	return &sharedServer{
		opts: &redis.Options{Addr: m.Addr()},
		url:  "redis://" + m.Addr() + "/0",
		mini: m,
	}, nil
}

// startTopology starts the shared cluster or Sentinel setup.
func startTopology(topo string) (*sharedServer, error) {
	dir, err := os.MkdirTemp("", "redistest-"+topo+"-")
	if err != nil {
		return nil, err
	}
	s := &sharedServer{dir: dir}
	if topo == "cluster" {
		s.cluster, err = startCluster(dir)
		if err == nil {
			s.opts = &redis.Options{Addr: s.cluster.Addrs()[0]}
		}
	} else {
		s.sentinel, err = startSentinel(dir)
		if err == nil {
			s.opts = &redis.Options{Addr: s.sentinel.data[0].Addr()}
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start shared %s: %w", topo, err)
	}
	s.url = "redis://" + s.opts.Addr + "/0"
	return s, nil
}

// client returns a new client of the kind the topology needs.
func (s *sharedServer) client() redis.UniversalClient {
	switch {
	case s.cluster != nil:
		return redis.NewClusterClient(s.cluster.Options())
	case s.sentinel != nil:
		return redis.NewFailoverClient(s.sentinel.Options())
	default:
		return redis.NewClient(s.options())
	}
}

// options returns a copy of the client options, since go-redis fills in
// defaults on the Options it is given.
func (s *sharedServer) options() *redis.Options {
	o := *s.opts
	return &o
}

// stopShared stops whatever the package started and makes later calls fail.
func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s := shared; s != nil {
		if s.proc != nil {
			s.proc.kill()
		}
		if s.cluster != nil {
			s.cluster.stop()
		}
		if s.sentinel != nil {
			s.sentinel.stop()
		}
		if s.dir != "" {
			_ = os.RemoveAll(s.dir)
		}
		if s.mini != nil {
			s.mini.Close()
		}
	}
	shared, sharedErr = nil, errStopped
}

// Main runs the package's tests, stops the shared server if this package
// started one, removes its directory, checks for leaked goroutines with
// goleak when the tests passed, and exits with the resulting code. Call it
// from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// No goroutines are ignored: go-redis clients stop theirs on Close and
// miniredis on Close, so anything left is a leak in the code under test.
func Main(m *testing.M) { MainCleanup(m, nil) }

// New returns a client connected to the package's shared test server and a
// key namespace unique to this call. The client is a *redis.Client, or a
// *redis.ClusterClient or failover *redis.Client when TopologyEnv asks for
// a cluster or Sentinel. The namespace is "t", a per-binary
// random id, a sequence number and the sanitized test name, uses only
// [A-Za-z0-9._-] and is at most 60 characters long. Tests keep their keys
// under namespace+":".
//
// At cleanup every key whose name starts with namespace+":" is deleted and
// the client is closed; keys outside the namespace are not touched. New
// fails the test if no server is available (see the package doc).
func New(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	s := getShared(t)
	ns := namespace(t.Name())
	c := s.client()
	t.Cleanup(func() {
		_ = c.Close() // the test may have closed it already
		if err := deleteNamespace(s, ns); err != nil {
			t.Errorf("redistest: delete keys of namespace %q: %v", ns, err)
		}
	})
	return c, ns
}

// Addr returns the "host:port" of the package's shared server, starting it
// if needed. Tests that start subprocesses pass it on. For a cluster or
// Sentinel topology it is one node (the first, or the initial master).
func Addr(t testing.TB) string {
	t.Helper()
	return getShared(t).opts.Addr
}

// URL returns a URL for the package's shared server, starting it if needed:
// REDIS_URL itself when that is set (so credentials and database carry
// over), otherwise "redis://host:port/0".
func URL(t testing.TB) string {
	t.Helper()
	return getShared(t).url
}

// runID tells apart test binaries that share one server through REDIS_URL.
var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}()

// nsSeq tells apart namespaces within one test binary.
var nsSeq atomic.Uint64

// namespace returns a fresh namespace for the test called name.
func namespace(name string) string {
	ns := "t" + runID + "-" + strconv.FormatUint(nsSeq.Add(1), 36) + "." + sanitize(name)
	if len(ns) > maxNamespaceLen {
		ns = ns[:maxNamespaceLen]
	}
	return ns
}

// sanitize maps a test name to [A-Za-z0-9._-]: "/" between subtests becomes
// "." and any other character "_".
func sanitize(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == '-':
			b.WriteByte(c)
		case c == '/':
			b.WriteByte('.')
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// globEscape escapes the characters that are special in Redis glob
// patterns outside a bracket expression, so the result matches only s.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// deleteNamespace unlinks every key that starts with ns+":", using its own
// connection so it works even if the test closed its client. On a cluster
// it scans every master.
func deleteNamespace(s *sharedServer, ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	c := s.client()
	defer c.Close()
	match := globEscape(ns+":") + "*"
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return unlinkMatching(ctx, node, match, true)
		})
	}
	return unlinkMatching(ctx, c, match, false)
}

// unlinkMatching unlinks the keys on one server that match the pattern;
// one key per UNLINK on a cluster node, where keys of one command must
// share a slot.
func unlinkMatching(ctx context.Context, c redis.Cmdable, match string, perKey bool) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return err
		}
		if perKey && len(keys) > 0 {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Unlink(ctx, k)
				}
				return nil
			})
			if err != nil {
				return err
			}
			keys = nil
		}
		for len(keys) > 0 {
			n := min(len(keys), unlinkBatch)
			if err := c.Unlink(ctx, keys[:n]...).Err(); err != nil {
				return err
			}
			keys = keys[n:]
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// Keys returns every key that matches pattern, as SCAN finds them; on a
// cluster client it scans every master. Tests use it instead of KEYS so that
// they mean the same on every topology.
func Keys(t testing.TB, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, scanCount).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatalf("redistest: scan %q: %v", pattern, err)
	}
	slices.Sort(out)
	return out
}
