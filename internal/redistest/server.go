package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process owned by one test, for fault tests that
// kill and restart Redis. Its methods are safe for concurrent use.
type Server struct {
	bin     string
	dir     string
	logPath string
	port    int
	args    []string
	tls     *tls.Config // nil for a plain TCP server
	dial    dialer
	argv    []string // the whole command line when not built from args (cluster nodes, sentinels)

	mu   sync.Mutex
	proc *process // nil or exited when the server is down
}

// Start starts a redis-server for the test on a free 127.0.0.1 port, with
// t.TempDir() as its directory and persistence off unless args (extra
// config, e.g. "--appendonly", "yes") turn it on. It waits until the server
// answers PING and kills it at cleanup. Start fails the test if
// redis-server is not on PATH or does not come up within 10 seconds.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := ServerBinary()
	if err != nil {
		t.Fatalf("redistest: Start: %v", err)
	}
	dir := t.TempDir()
	s := &Server{bin: bin, dir: dir, logPath: logFile(dir), args: slices.Clone(args), dial: plainDial}
	p, port, err := launchFreePort(bin, dir, s.logPath, s.args, s.dial)
	if err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.proc, s.port = p, port
	t.Cleanup(s.Kill) // runs before t.TempDir's removal, which was registered first
	return s
}

// Addr returns the server's "127.0.0.1:port"; it stays the same across
// Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Client returns a new client for the server, closed at the test's cleanup.
// It reconnects by itself after Restart.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL to the server and waits for it to exit, like a crash:
// only what was already written to the AOF survives. It does nothing if the
// server is down.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
}

// Pause stops the server's process with SIGSTOP, as a hung or cut-off
// node: it keeps its connections but answers nothing (and a replica applies
// nothing) until Resume. It does nothing if the server is down.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && s.proc.running() {
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Stop shuts the server down gracefully with SIGTERM (flushing the AOF if
// enabled; no RDB is saved unless args configured "save") and waits for it
// to exit, sending SIGKILL after 10 seconds. It does nothing if the server
// is down.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.terminate(stopTimeout)
	}
}

// Restart starts the server again on the same port and directory with the
// same args, so data persisted with "--appendonly yes" is reloaded, and
// waits until it answers PING (after loading). A server that is still
// running is stopped first as by Stop. Restart fails the test if the server
// does not come back within 10 seconds.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && s.proc.running() {
		s.proc.terminate(stopTimeout)
	}
	s.proc = nil
	var err error
	// The freed port can be probed by a parallel test's freePort for a
	// moment, so an early exit is retried.
	for range portAttempts {
		var p *process
		if p, err = launchArgs(s.bin, s.dir, s.logPath, s.port, s.cmdline(), s.dialer()); err == nil {
			s.proc = p
			return
		}
		if !errors.Is(err, errExited) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redistest: restart redis-server on %s: %v\n--- last lines of redis-server output ---\n%s",
		s.Addr(), err, logTail(s.logPath, logTailLines))
}

// cmdline returns the server's command line.
func (s *Server) cmdline() []string {
	if s.argv != nil {
		return s.argv
	}
	return serverArgs(s.port, s.dir, s.args)
}

// startServer starts a redis-server owned by no test in dir, on free
// loopback ports: argv gets the port and one more free port (a cluster
// node's bus port) and returns the command line. It retries with new ports
// when the server exits early because a port was taken meanwhile.
func startServer(bin, dir string, argv func(port, extra int) []string) (*Server, error) {
	s := &Server{bin: bin, dir: dir, logPath: logFile(dir)}
	var lastErr error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		extra, err := freePort()
		if err != nil {
			return nil, err
		}
		if extra == port {
			continue
		}
		args := argv(port, extra)
		p, err := launchArgs(bin, dir, s.logPath, port, args, plainDial)
		if err == nil {
			s.proc, s.port, s.argv = p, port, args
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, fmt.Errorf("%w\n--- last lines of redis-server output ---\n%s", lastErr, logTail(s.logPath, logTailLines))
}

// running reports whether the server's process is up.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && s.proc.running()
}

// dialer is how readiness is probed: s.dial for TLS servers, else plain TCP.
func (s *Server) dialer() dialer {
	if s.dial != nil {
		return s.dial
	}
	return plainDial
}
