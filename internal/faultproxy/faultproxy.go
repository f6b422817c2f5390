// Package faultproxy is a loopback TCP proxy in front of a Redis server
// that breaks the connections through it on demand, for tests of what a
// lost reply, a stall or a cut connection does to delayq.
//
// It reads the Redis protocol (RESP2 and RESP3) both ways, so it can let
// the server run a command and then lose the reply: DropReply swallows the
// reply of the next command a test picks and cuts that connection, which
// is what a network failure after the server answered looks like to the
// client. HoldReplies holds the replies of the commands a test picks (the
// server has run them), as a slow or hung server does for some keys only.
// Drop cuts every connection, Stall holds all traffic for a while, Slow
// delays it.
package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from its loopback address to a target.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu         sync.Mutex
	conns      map[net.Conn]struct{}
	stallUntil time.Time
	slowUntil  time.Time
	latency    time.Duration
	drops      []*dropRule
	holds      []*holdRule
	closed     chan struct{}
}

// holdRule is one HoldReplies: the replies of the commands match accepts
// are held for d.
type holdRule struct {
	match func(cmd []string) bool
	d     time.Duration
	held  int // replies held so far
}

// fate is what becomes of the reply of one command: lost (drop) or held
// for a while.
type fate struct {
	drop *dropRule
	hold time.Duration
}

// dropRule is one DropReply: the reply of the next command that match
// accepts is lost.
type dropRule struct {
	match   func(cmd []string) bool
	dropped chan []string // the command whose reply was lost
}

// Start starts a proxy to target (host:port) on a free loopback port; it is
// closed when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropReply makes the proxy lose the reply of the next command (sent after
// this call, on any connection) that match accepts: the server gets and runs
// the command, its reply is thrown away and the connection is closed. match
// gets the command's arguments, the command name first as sent. The
// returned channel receives that command once its reply is lost.
func (p *Proxy) DropReply(match func(cmd []string) bool) <-chan []string {
	r := &dropRule{match: match, dropped: make(chan []string, 1)}
	p.mu.Lock()
	p.drops = append(p.drops, r)
	p.mu.Unlock()
	return r.dropped
}

// HoldReplies makes the proxy hold the reply of every command that match
// accepts, sent after this call on any connection, for d before passing
// it on: the server runs the command at once, the client gets its answer
// d later (and the replies after it on that connection wait behind it, as
// they would behind a slow server). stop ends it, for commands sent from
// then on, and returns how many replies were held.
func (p *Proxy) HoldReplies(match func(cmd []string) bool, d time.Duration) (stop func() int) {
	r := &holdRule{match: match, d: d}
	p.mu.Lock()
	p.holds = append(p.holds, r)
	p.mu.Unlock()
	return func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, h := range p.holds {
			if h == r {
				p.holds = append(p.holds[:i], p.holds[i+1:]...)
				break
			}
		}
		return r.held
	}
}

// Command returns a match for DropReply: a command named name (any case)
// whose arguments contain every one of args.
func Command(name string, args ...string) func(cmd []string) bool {
	return func(cmd []string) bool {
		if len(cmd) == 0 || !strings.EqualFold(cmd[0], name) {
			return false
		}
		for _, a := range args {
			found := false
			for _, c := range cmd[1:] {
				if c == a {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
}

// Drop closes every open connection and returns how many there were.
func (p *Proxy) Drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		c.Close()
	}
	return n
}

// Stall holds all traffic, both ways, for d.
func (p *Proxy) Stall(d time.Duration) {
	p.mu.Lock()
	p.stallUntil = time.Now().Add(d)
	p.mu.Unlock()
}

// Slow delays every chunk by latency for d.
func (p *Proxy) Slow(latency, d time.Duration) {
	p.mu.Lock()
	p.latency, p.slowUntil = latency, time.Now().Add(d)
	p.mu.Unlock()
}

// Close stops accepting, closes every connection and waits for the copying
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return
	default:
	}
	close(p.closed)
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		fate := make(chan fate, 1024) // per command sent: what becomes of its reply
		p.wg.Go(func() { p.requests(up, c, fate) })
		p.wg.Go(func() { p.replies(c, up, fate) })
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		for _, c := range conns {
			c.Close()
		}
		return false
	default:
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(a, b net.Conn) {
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
	a.Close()
	b.Close()
}

// requests copies commands from the client to the server, one frame at a
// time, telling replies the fate of each.
func (p *Proxy) requests(server, client net.Conn, fates chan<- fate) {
	defer close(fates)
	p.pump(server, client, func(_ []byte, cmd []string) bool {
		fates <- p.take(cmd)
		return true
	})
}

// take returns the fate of the reply of cmd: the first drop rule that
// matches it (which it removes), else the hold of the first hold rule
// that does.
func (p *Proxy) take(cmd []string) fate {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.drops {
		if r.match(cmd) {
			p.drops = append(p.drops[:i], p.drops[i+1:]...)
			r.dropped <- cmd
			return fate{drop: r}
		}
	}
	for _, h := range p.holds {
		if h.match(cmd) {
			h.held++
			return fate{hold: h.d}
		}
	}
	return fate{}
}

// replies copies replies from the server to the client, one frame at a
// time; the reply of a command whose fate is a drop rule is thrown away and
// the connection cut, that of a held one waits. Push frames (RESP3
// Pub/Sub) answer no command.
func (p *Proxy) replies(client, server net.Conn, fates <-chan fate) {
	p.pump(client, server, func(frame []byte, _ []string) bool {
		if frame[0] == '>' {
			return true
		}
		f, ok := <-fates
		if !ok || f.drop != nil {
			return false // a lost reply: pump cuts the connection
		}
		if f.hold > 0 {
			t := time.NewTimer(f.hold)
			defer t.Stop()
			select {
			case <-p.closed:
				return false
			case <-t.C:
			}
		}
		return true
	})
}

// pump copies frames from src to dst, each after the stall and latency of
// the moment and only if pass lets it through; it cuts both connections
// when either side fails or pass refuses a frame.
func (p *Proxy) pump(dst, src net.Conn, pass func(frame []byte, cmd []string) bool) {
	defer p.untrack(dst, src)
	r := bufio.NewReader(src)
	for {
		frame, cmd, err := readFrame(r)
		if err != nil || !p.gate() || !pass(frame, cmd) {
			return
		}
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

// gate waits out a stall and adds the current latency; false when the proxy
// is closed meanwhile.
func (p *Proxy) gate() bool {
	for {
		p.mu.Lock()
		now := time.Now()
		wait := p.stallUntil.Sub(now)
		if wait <= 0 && now.Before(p.slowUntil) {
			wait = p.latency
		}
		p.mu.Unlock()
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(min(wait, 50*time.Millisecond))
		select {
		case <-p.closed:
			t.Stop()
			return false
		case <-t.C:
		}
		if wait <= 50*time.Millisecond {
			return true
		}
	}
}

// errProtocol is returned for bytes that are not RESP.
var errProtocol = errors.New("faultproxy: not RESP")

// readFrame reads one RESP value and returns its bytes and, when it is an
// array of bulk strings (a command), their text. Inline commands (a line
// of text, as redis-cli may send) come back as one frame too.
func readFrame(r *bufio.Reader) (frame []byte, cmd []string, err error) {
	var buf []byte
	cmd, err = readValue(r, &buf, 0)
	return buf, cmd, err
}

// readValue reads one value into buf. At depth 0, the strings of an array
// are returned.
func readValue(r *bufio.Reader, buf *[]byte, depth int) ([]string, error) {
	if depth > 64 {
		return nil, errProtocol
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	*buf = append(*buf, line...)
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	head, body := line[0], string(line[1:len(line)-2])
	switch head {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil, nil
	case '$', '!', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, errProtocol
		}
		if n < 0 {
			return nil, nil
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, err
		}
		*buf = append(*buf, data...)
		if depth == 1 {
			return []string{string(data[:n])}, nil
		}
		return nil, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, errProtocol
		}
		if head == '%' || head == '|' {
			n *= 2 // maps and attributes hold pairs
		}
		var out []string
		for range max(n, 0) {
			s, err := readValue(r, buf, depth+1)
			if err != nil {
				return nil, err
			}
			if depth == 0 {
				out = append(out, s...)
			}
		}
		if head == '|' {
			// An attribute precedes the value it describes.
			s, err := readValue(r, buf, depth)
			return s, err
		}
		return out, nil
	default:
		if depth == 0 {
			return strings.Fields(string(line)), nil // inline command
		}
		return nil, fmt.Errorf("%w: type byte %q", errProtocol, head)
	}
}
