package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultAddr is where Serve listens when given no address: loopback only.
const DefaultAddr = "127.0.0.1:8080"

// ServeOptions configure Serve.
type ServeOptions struct {
	// AllowRemote lets Serve listen on an address that is not loopback
	// (e.g. ":8080" or "0.0.0.0:8080"). It is refused anyway when the
	// dashboard has no BearerToken or basic auth: put it behind your own
	// authenticating proxy on loopback instead.
	AllowRemote bool

	// Ready, if set, is called with the listening address once requests
	// are accepted (useful with port 0).
	Ready func(net.Addr)

	// ShutdownTimeout bounds the graceful shutdown when ctx is done. 0
	// means 5s.
	ShutdownTimeout time.Duration
}

// ErrNotLoopback is wrapped by Serve when the address is not loopback and
// remote access was not allowed (or is not safe: no authentication).
var ErrNotLoopback = errors.New("dashboard: address is not loopback")

// Serve serves d on addr ("" means DefaultAddr) until ctx is done, then shuts
// down gracefully and returns nil. It refuses, before listening, an address
// that is not loopback unless opts.AllowRemote is set and the dashboard
// requires authentication; the error wraps ErrNotLoopback.
func Serve(ctx context.Context, addr string, d *Dashboard, opts ServeOptions) error {
	if d == nil {
		return errors.New("dashboard: Serve: nil dashboard")
	}
	if addr == "" {
		addr = DefaultAddr
	}
	if err := checkAddr(addr, opts.AllowRemote, len(d.admitted) > 0); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           d,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}
	select {
	case err := <-done:
		return fmt.Errorf("dashboard: serve: %w", err)
	case <-ctx.Done():
	}
	timeout := opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-done // http.ErrServerClosed
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("dashboard: shutdown: %w", err)
	}
	return nil
}

// checkAddr enforces the loopback rule of Serve.
func checkAddr(addr string, allowRemote, authenticated bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard: address %q: %w", addr, err)
	}
	if isLoopback(host) {
		return nil
	}
	switch {
	case !allowRemote:
		return fmt.Errorf("%w: %q would accept connections from other machines; use 127.0.0.1, or allow remote access and set a token or basic auth", ErrNotLoopback, addr)
	case !authenticated:
		return fmt.Errorf("%w: %q is open to other machines but no token or basic auth is set", ErrNotLoopback, addr)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
