package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// readyTimeout bounds how long a started redis-server may take to answer PING.
	readyTimeout = 10 * time.Second
	// stopTimeout bounds a graceful shutdown before SIGKILL is sent.
	stopTimeout = 10 * time.Second
	// portAttempts is how many free ports are tried when redis-server cannot bind.
	portAttempts = 5
	// logTailLines is how many lines of server output a failure message shows.
	logTailLines = 20
)

// errExited reports that redis-server exited before it answered PING, most
// often because another process took the port between probe and bind.
var errExited = errors.New("redis-server exited before answering PING")

// process is one running redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been waited for
}

// serverArgs returns the command line for a loopback-only redis-server with
// persistence off; extra is appended, so it can turn persistence back on.
func serverArgs(port int, dir string, extra []string) []string {
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "yes",
	}
	return append(args, extra...)
}

// dialer opens the connection that PING is sent over: plain TCP, or TLS for
// a server started by StartTLS.
type dialer func(addr string) (net.Conn, error)

func plainDial(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }

// launch starts redis-server on port with its output appended to logPath
// and waits until it answers PING over dial. On failure the process is gone.
func launch(bin, dir, logPath string, port int, extra []string, dial dialer) (*process, error) {
	return launchArgs(bin, dir, logPath, port, serverArgs(port, dir, extra), dial)
}

// launchArgs is launch with the whole command line given: args must make
// the server listen on 127.0.0.1:port.
func launchArgs(bin, dir, logPath string, port int, args []string, dial dialer) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// An *os.File needs no copying goroutine, so nothing is left behind for goleak.
	cmd.Stdout = logf
	cmd.Stderr = logf
	setPdeathsig(cmd)
	err = cmd.Start()
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := p.waitReady(addr, readyTimeout, dial); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// launchFreePort starts redis-server on a free loopback port, trying a new
// port when the server exits early, and returns the process and its port.
func launchFreePort(bin, dir, logPath string, extra []string, dial dialer) (*process, int, error) {
	var (
		lastErr  error
		attempts int
	)
	for range portAttempts {
		attempts++
		port, err := freePort()
		if err != nil {
			return nil, 0, err
		}
		p, err := launch(bin, dir, logPath, port, extra, dial)
		if err == nil {
			return p, port, nil
		}
		lastErr = err
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, 0, fmt.Errorf("%w (%d attempt(s))\n--- last lines of redis-server output ---\n%s",
		lastErr, attempts, logTail(logPath, logTailLines))
}

// waitReady polls addr with PING until it answers PONG, the process exits,
// or timeout passes. A server still loading its AOF answers -LOADING and is
// polled again.
func (p *process) waitReady(addr string, timeout time.Duration, dial dialer) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		select {
		case <-p.done:
			return errExited
		default:
		}
		if lastErr = ping(addr, dial); lastErr == nil {
			// Another server that took the same port (a parallel test's)
			// answers PING too: make sure it is this process.
			pid, err := serverPID(addr, dial)
			if err != nil {
				return err
			}
			if pid != 0 && pid != p.cmd.Process.Pid {
				return fmt.Errorf("%w: %s is served by process %d, not by the one started (%d)", errExited, addr, pid, p.cmd.Process.Pid)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %v", addr, timeout, lastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends one RESP PING over a fresh connection.
func ping(addr string, dial dialer) error {
	conn, err := dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	// A server started with --requirepass answers -NOAUTH: it is up.
	if line = strings.TrimSpace(line); line != "+PONG" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// serverPID returns the process_id INFO server reports on addr, or 0 when
// the server does not tell (one started with --requirepass answers
// -NOAUTH).
func serverPID(addr string, dial dialer) (int, error) {
	conn, err := dial(addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	head = strings.TrimSpace(head)
	if strings.HasPrefix(head, "-") {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(head, "$"))
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO server answered %q", head)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, nil
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM, which makes redis-server shut down cleanly
// (flushing the AOF if enabled), and falls back to SIGKILL after timeout.
func (p *process) terminate(timeout time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.kill()
	}
}

// freePort asks the kernel for a free loopback port and releases it. It
// never gives one port twice in a process: the kernel may offer a released
// port again, and two parallel tests would start servers on it.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, err
		}
		if !portsGiven[port] {
			portsGiven[port] = true
			return port, nil
		}
	}
	return 0, errors.New("redistest: the kernel offered only ports given already")
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // every port freePort returned
)

// logTail returns the last n lines of the file at path, or a note why it
// could not be read.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no output: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// logFile is the name of the file in a server's directory that receives its output.
func logFile(dir string) string { return filepath.Join(dir, "redis-server.log") }
