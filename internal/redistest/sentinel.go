package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// SentinelMaster is the master name the Sentinels of StartSentinel
	// monitor.
	SentinelMaster = "delayq"

	// SentinelDownAfter is how long those Sentinels wait for a silent master
	// before they agree it is down and promote its replica.
	SentinelDownAfter = time.Second

	sentinelCount = 3
)

// Sentinel is a master, its replica and three Sentinels (quorum 2) on free
// 127.0.0.1 ports, with persistence off. Kill the master to make the
// Sentinels promote the replica; Restart it afterwards and they turn it into
// a replica of the new master.
type Sentinel struct {
	data      []*Server // the initial master, then its replica
	sentinels []*Server
}

// StartSentinel starts the servers and Sentinels for the test and stops
// them at cleanup. It returns once the replica is in sync and every Sentinel
// knows the replica and the other Sentinels, so that a failover can be
// authorised. It fails the test if that takes more than a minute.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s, err := startSentinel(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: start sentinel setup: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

func startSentinel(dir string) (*Sentinel, error) {
	bin, err := ServerBinary()
	if err != nil {
		return nil, fmt.Errorf("sentinel needs a server binary: %w", err)
	}
	s := &Sentinel{}
	fail := func(err error) (*Sentinel, error) {
		s.stop()
		return nil, err
	}
	var masterPort string
	for i, name := range []string{"master", "replica"} {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
		var extra []string
		if i == 1 {
			extra = []string{"--replicaof", "127.0.0.1", masterPort}
		}
		srv, err := startServer(bin, d, func(port, _ int) []string { return serverArgs(port, d, extra) })
		if err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
		s.data = append(s.data, srv)
		masterPort = strconv.Itoa(s.data[0].port)
	}
	for i := range sentinelCount {
		d := filepath.Join(dir, "sentinel"+strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
		conf := filepath.Join(d, "sentinel.conf")
		srv, err := startServer(bin, d, func(port, _ int) []string {
			// Sentinel rewrites its config file, so each start gets a fresh one.
			text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %q
sentinel monitor %s 127.0.0.1 %s 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 10000
sentinel parallel-syncs %s 1
`, port, d, SentinelMaster, masterPort, SentinelMaster, SentinelDownAfter.Milliseconds(), SentinelMaster, SentinelMaster)
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				return []string{"--no-such-option"} // makes the start fail with the log saying why
			}
			return []string{conf, "--sentinel"}
		})
		if err != nil {
			return fail(fmt.Errorf("sentinel %d: %w", i, err))
		}
		s.sentinels = append(s.sentinels, srv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *Sentinel) stop() {
	for _, srv := range slices.Concat(s.sentinels, s.data) {
		srv.Kill()
	}
}

// Servers returns the two data servers: the initial master, then the
// initial replica.
func (s *Sentinel) Servers() []*Server { return slices.Clone(s.data) }

// SentinelAddrs returns the "127.0.0.1:port" of the three Sentinels.
func (s *Sentinel) SentinelAddrs() []string { return addrs(s.sentinels) }

// Options returns failover client options for the setup.
func (s *Sentinel) Options() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs()}
}

// Client returns a new failover client, which follows the master through
// failovers; it is closed at the test's cleanup.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(s.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Master returns the data server the Sentinels name as master now.
func (s *Sentinel) Master(t testing.TB) *Server {
	t.Helper()
	m, err := s.master(context.Background())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return m
}

func (s *Sentinel) master(ctx context.Context) (*Server, error) {
	var lastErr error = errors.New("no sentinel is running")
	for _, srv := range s.sentinels {
		if !srv.running() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: srv.Addr()})
		addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		_ = sc.Close()
		if err != nil {
			lastErr = err
			continue
		}
		for _, d := range s.data {
			if len(addr) == 2 && d.Addr() == addr[0]+":"+addr[1] {
				return d, nil
			}
		}
		lastErr = fmt.Errorf("sentinel %s names unknown master %v", srv.Addr(), addr)
	}
	return nil, lastErr
}

// WaitReady waits until the Sentinels agree on a running master that has
// an online replica, and each Sentinel knows the replica and the two other
// Sentinels. It fails the test after a minute. Call it after a failover and
// after restarting the old master.
func (s *Sentinel) WaitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

func (s *Sentinel) waitReady(ctx context.Context) error {
	var last error
	for {
		if last = s.ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinel setup not ready: %w", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Sentinel) ready(ctx context.Context) error {
	var master string
	for _, srv := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		m, err := sc.Master(ctx, SentinelMaster).Result()
		_ = sc.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", srv.Addr(), err)
		}
		addr := m["ip"] + ":" + m["port"]
		switch {
		case master != "" && addr != master:
			return fmt.Errorf("sentinels disagree on the master: %s and %s", master, addr)
		case m["flags"] != "master":
			return fmt.Errorf("sentinel %s: master %s has flags %q", srv.Addr(), addr, m["flags"])
		case m["num-slaves"] == "0":
			return fmt.Errorf("sentinel %s knows no replica", srv.Addr())
		case m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1):
			return fmt.Errorf("sentinel %s knows %s other sentinels", srv.Addr(), m["num-other-sentinels"])
		}
		master = addr
	}
	rdb := redis.NewClient(&redis.Options{Addr: master, MaxRetries: -1})
	defer rdb.Close()
	repl, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("master %s: %w", master, err)
	}
	f := infoFields(repl)
	online := strings.Contains(f["slave0"], "state=online") || strings.Contains(f["slave1"], "state=online")
	if f["role"] != "master" || !online {
		return fmt.Errorf("master %s has no online replica (role %s, %s replicas)", master, f["role"], f["connected_slaves"])
	}
	return nil
}

// Rejoin restarts a data server that was killed, as a replica of the
// current master, the way an operator brings a failed node back (the
// Sentinels would convert a restarted old master too, but only after their
// ten-second check). It waits until the setup is ready again.
func (s *Sentinel) Rejoin(t testing.TB, srv *Server) {
	t.Helper()
	m := s.Master(t)
	if m == srv {
		t.Fatalf("redistest: Rejoin(%s): it is still the master", srv.Addr())
	}
	srv.mu.Lock()
	srv.argv = serverArgs(srv.port, srv.dir, []string{"--replicaof", "127.0.0.1", strconv.Itoa(m.port)})
	srv.mu.Unlock()
	srv.Restart(t)
	s.WaitReady(t)
}
