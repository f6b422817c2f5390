package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Scripted is a RESP listener on a free 127.0.0.1 port that answers each
// command with what its answer function returns, for servers a test cannot
// run: an old Redis, a server that hides INFO. It speaks RESP2 only (it
// refuses HELLO, as servers before 6.0 do, and clients then fall back),
// answers CLIENT (go-redis's CLIENT SETINFO) with OK and PING with PONG,
// and records the name of every command it is sent.
type Scripted struct {
	ln     net.Listener
	answer func(cmd []string) string

	mu     sync.Mutex
	cmds   []string // command names, upper case, in order
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// StartScripted starts a Scripted server, stopped at the test's cleanup.
// answer gets each command other than HELLO, CLIENT and PING (name and
// arguments) and returns the whole RESP reply, e.g. "+OK\r\n" or
// [Bulk]("...").
func StartScripted(t testing.TB, answer func(cmd []string) string) *Scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: StartScripted: %v", err)
	}
	s := &Scripted{ln: ln, answer: answer}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.stop)
	return s
}

// Bulk is s as a RESP bulk string.
func Bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// Addr returns the server's "127.0.0.1:port".
func (s *Scripted) Addr() string { return s.ln.Addr().String() }

// Commands returns the names of the commands sent so far, upper case, in
// order, without the HELLO and CLIENT of each new connection.
func (s *Scripted) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.cmds {
		if c != "HELLO" && c != "CLIENT" {
			out = append(out, c)
		}
	}
	return out
}

func (s *Scripted) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns = append(s.conns, c)
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *Scripted) serve(c net.Conn) {
	defer s.wg.Done()
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(cmd[0])
		s.mu.Lock()
		s.cmds = append(s.cmds, name)
		s.mu.Unlock()
		var reply string
		switch name {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "CLIENT":
			reply = "+OK\r\n"
		case "PING":
			reply = "+PONG\r\n"
		default:
			reply = s.answer(cmd)
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// stop closes the listener and every connection and waits for their
// goroutines.
func (s *Scripted) stop() {
	_ = s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// readCommand reads one RESP array of bulk strings, as clients send.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	out := make([]string, n)
	for i := range out {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk header %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		out[i] = string(buf[:size])
	}
	return out, nil
}
