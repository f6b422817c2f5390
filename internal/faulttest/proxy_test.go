package faulttest_test

import (
	"net"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP connections from its loopback address to target, and
// breaks them on demand: Drop closes every open connection, Stall holds all
// traffic for a while, Slow delays every chunk for a while.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu         sync.Mutex
	conns      map[net.Conn]struct{}
	stallUntil time.Time
	slowUntil  time.Time
	latency    time.Duration
	closed     chan struct{}
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
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
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

func (p *proxy) track(conns ...net.Conn) bool {
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

// pipe copies src to dst through the fault gate until either side fails,
// then closes both.
func (p *proxy) pipe(dst, src net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// gate waits out a stall and adds the current latency; false when the proxy
// is closed meanwhile.
func (p *proxy) gate() bool {
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

// Drop closes every open connection and returns how many there were.
func (p *proxy) Drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		c.Close()
	}
	return n
}

// Stall holds all traffic, both ways, for d.
func (p *proxy) Stall(d time.Duration) {
	p.mu.Lock()
	p.stallUntil = time.Now().Add(d)
	p.mu.Unlock()
}

// Slow delays every chunk by latency for d.
func (p *proxy) Slow(latency, d time.Duration) {
	p.mu.Lock()
	p.latency, p.slowUntil = latency, time.Now().Add(d)
	p.mu.Unlock()
}

// Close stops accepting, closes every connection and waits for the copying
// goroutines.
func (p *proxy) Close() {
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
