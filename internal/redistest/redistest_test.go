package redistest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var namespaceRE = regexp.MustCompile(`^t[A-Za-z0-9._-]{1,59}$`)

func TestNewNamespacesDiffer(t *testing.T) {
	t.Parallel()

	var (
		mu   sync.Mutex
		seen = map[string]string{}
	)
	t.Run("group", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				_, ns := redistest.New(t)
				mu.Lock()
				seen[name] = ns
				mu.Unlock()
			})
		}
	})
	if seen["a"] == "" || seen["a"] == seen["b"] {
		t.Fatalf("parallel tests got namespaces %q and %q, want two different ones", seen["a"], seen["b"])
	}

	_, ns1 := redistest.New(t)
	_, ns2 := redistest.New(t)
	if ns1 == ns2 {
		t.Fatalf("two New calls in one test both got namespace %q", ns1)
	}
}

func TestNewNamespaceFormat(t *testing.T) {
	t.Parallel()

	for _, name := range []string{
		"plain",
		"spaces and * ? [ ] \\ { } : glob chars",
		strings.Repeat("long", 40),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, ns := redistest.New(t)
			if !namespaceRE.MatchString(ns) {
				t.Fatalf("namespace %q (%d chars) does not match %v", ns, len(ns), namespaceRE)
			}
		})
	}
}

func TestNewCleanupDeletesNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check, _ := redistest.New(t)

	const n = 1234 // more than one SCAN page and one UNLINK batch
	var ns string
	t.Run("writer", func(t *testing.T) {
		c, sub := redistest.New(t)
		ns = sub
		pipe := c.Pipeline()
		for i := range n {
			pipe.Set(ctx, ns+":k"+strconv.Itoa(i), i, 0)
		}
		pipe.ZAdd(ctx, ns+":{q}:due", redis.Z{Score: 1, Member: "job"})
		pipe.HSet(ctx, ns+":{q}:job:1", "state", "pending")
		pipe.Set(ctx, ns+"_outside", "kept", 0) // shares the prefix but not ns+":"
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		// Cleanup must not depend on the test's client still being open.
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { check.Del(context.Background(), ns+"_outside") })

	var left []string
	iter := check.Scan(ctx, 0, ns+"*", 1000).Iterator()
	for iter.Next(ctx) {
		left = append(left, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{ns + "_outside"}; fmt.Sprint(left) != fmt.Sprint(want) {
		t.Fatalf("keys left after the subtest's cleanup: %q, want %q", left, want)
	}
}

func TestAddrURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	addr, url := redistest.Addr(t), redistest.URL(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("URL %q: %v", url, err)
	}
	if opts.Addr != addr {
		t.Fatalf("URL %q has address %q, Addr returned %q", url, opts.Addr, addr)
	}

	c, ns := redistest.New(t)
	if err := c.Set(ctx, ns+":k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	other := redis.NewClient(opts)
	t.Cleanup(func() { _ = other.Close() })
	if got, err := other.Get(ctx, ns+":k").Result(); err != nil || got != "v" {
		t.Fatalf("GET through URL = %q, %v; want \"v\"", got, err)
	}
}

func TestRedisURL(t *testing.T) {
	t.Parallel()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		t.Skip("REDIS_URL not set")
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if got := redistest.URL(t); got != u {
		t.Fatalf("URL = %q, want REDIS_URL %q", got, u)
	}
	if got := redistest.Addr(t); got != opts.Addr {
		t.Fatalf("Addr = %q, want %q", got, opts.Addr)
	}
	c, _ := redistest.New(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestServerKillRestart(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name     string
		args     []string
		down     func(*redistest.Server)
		wantKept bool
	}{
		{"aof always, kill", []string{"--appendonly", "yes", "--appendfsync", "always"}, (*redistest.Server).Kill, true},
		{"aof everysec, stop", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, (*redistest.Server).Stop, true},
		{"no persistence, kill", nil, (*redistest.Server).Kill, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := redistest.Start(t, tt.args...)
			c := s.Client(t)
			addr := s.Addr()

			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.RPush(ctx, "l", "a", "b", "c").Err(); err != nil {
				t.Fatal(err)
			}

			tt.down(s)
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Fatalf("%s still accepts connections while the server is down", addr)
			}

			s.Restart(t)
			if s.Addr() != addr {
				t.Fatalf("Addr after Restart = %q, want %q", s.Addr(), addr)
			}
			got, err := c.Get(ctx, "k").Result()
			switch {
			case tt.wantKept && (err != nil || got != "v"):
				t.Fatalf("GET k after restart = %q, %v; want \"v\"", got, err)
			case !tt.wantKept && err != redis.Nil:
				t.Fatalf("GET k after restart = %q, %v; want redis.Nil", got, err)
			}
			if tt.wantKept {
				l, err := c.LRange(ctx, "l", 0, -1).Result()
				if err != nil || strings.Join(l, ",") != "a,b,c" {
					t.Fatalf("LRANGE l after restart = %q, %v; want [a b c]", l, err)
				}
			}
		})
	}
}

func TestServerRestartRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, "--appendonly", "yes")
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t) // stops the running server gracefully first
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after restart = %q, %v; want \"v\"", got, err)
	}
}

// fakeTB records Fatalf instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	failed string
}

func (*fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestWaitFor(t *testing.T) {
	t.Parallel()

	t.Run("becomes true", func(t *testing.T) {
		t.Parallel()
		calls := 0
		redistest.WaitFor(t, 5*time.Second, "never reached 3", func() bool {
			calls++
			return calls == 3
		})
		if calls != 3 {
			t.Fatalf("cond called %d times, want 3", calls)
		}
	})

	t.Run("times out", func(t *testing.T) {
		t.Parallel()
		f := &fakeTB{}
		start := time.Now()
		redistest.WaitFor(f, 30*time.Millisecond, "the thing", func() bool { return false })
		if !strings.Contains(f.failed, "the thing") {
			t.Fatalf("failure message %q does not contain msg", f.failed)
		}
		if d := time.Since(start); d < 30*time.Millisecond {
			t.Fatalf("gave up after %v, before the 30ms timeout", d)
		}
	})
}

// childEnv is set when the test binary runs itself to check how the shared
// server is chosen when redis-server is not on PATH.
const childEnv = "REDISTEST_CHILD"

func TestChildProcess(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("only runs in a child process started by TestSharedServerWithoutRedisServer")
	}
	ctx := context.Background()
	c, ns := redistest.New(t)
	if err := c.Set(ctx, ns+":k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, ns+":k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want \"v\"", got, err)
	}
	// A real server names its binary in INFO server; miniredis has no
	// such section.
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if exe, ok := strings.CutPrefix(line, "executable:"); ok {
				t.Logf("shared server executable %s", exe)
			}
		}
	}
}

func TestSharedServerWithoutRedisServer(t *testing.T) {
	t.Parallel()
	if os.Getenv(childEnv) != "" {
		t.Skip("already in a child process")
	}

	bin, err := redistest.ServerBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name       string
		require    bool
		server     string // DELAYQ_REDIS_SERVER
		wantOK     bool
		wantOutput string
	}{
		{"falls back to miniredis", false, "", true, "using embedded miniredis"},
		{"fails with DELAYQ_REQUIRE_REDIS", true, "", false, "redis-server not found on PATH and DELAYQ_REQUIRE_REDIS=1"},
		{"runs the binary DELAYQ_REDIS_SERVER names", true, bin, true, "shared server executable " + bin},
		{"a missing DELAYQ_REDIS_SERVER fails, not miniredis", false, "/nonexistent/valkey-server", false,
			`DELAYQ_REDIS_SERVER="/nonexistent/valkey-server"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1", "-test.v")
			for _, kv := range os.Environ() {
				switch strings.SplitN(kv, "=", 2)[0] {
				case "PATH", "REDIS_URL", "DELAYQ_REQUIRE_REDIS", redistest.ServerEnv, childEnv:
				default:
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, childEnv+"=1", "PATH="+t.TempDir())
			if tt.require {
				cmd.Env = append(cmd.Env, "DELAYQ_REQUIRE_REDIS=1")
			}
			if tt.server != "" {
				cmd.Env = append(cmd.Env, redistest.ServerEnv+"="+tt.server)
			}
			out, err := cmd.CombinedOutput()
			if ok := err == nil; ok != tt.wantOK {
				t.Fatalf("child succeeded = %v, want %v (err %v); output:\n%s", ok, tt.wantOK, err, out)
			}
			if !strings.Contains(string(out), tt.wantOutput) {
				t.Fatalf("child output does not contain %q:\n%s", tt.wantOutput, out)
			}
		})
	}
}

// TestStartRunsServerEnv: Start runs the binary DELAYQ_REDIS_SERVER names
// (here a wrapper that records its arguments and runs the real server),
// with redis-server's options.
func TestStartRunsServerEnv(t *testing.T) {
	bin, err := redistest.ServerBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	marker := filepath.Join(dir, "argv")
	wrapper := filepath.Join(dir, "compatible-server")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '" + marker + "'\nexec '" + bin + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(redistest.ServerEnv, wrapper)
	if got, err := redistest.ServerBinary(); err != nil || got != wrapper {
		t.Fatalf("ServerBinary() = %q, %v; want %q", got, err, wrapper)
	}
	s := redistest.Start(t)
	if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING the server started through %s: %v", wrapper, err)
	}
	argv, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the wrapper named by %s was not run: %v", redistest.ServerEnv, err)
	}
	_, port, _ := net.SplitHostPort(s.Addr())
	if want := "--port\n" + port + "\n"; !strings.Contains(string(argv), want) {
		t.Fatalf("the wrapper was run with\n%s\nwant the server's port among them (%q)", argv, want)
	}
}
