// Package dashserve serves the dashboard on a listener of its own, as
// `delayq dashboard` does: loopback only unless remote access is allowed
// and the dashboard requires credentials of at least MinRemoteSecret bytes.
// It also carries, in the context of the requests it accepts on a
// non-loopback address, the host that address names, which the dashboard's
// Host check admits (Host).
package dashserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultAddr is where Serve listens when given no address: loopback only.
const DefaultAddr = "127.0.0.1:8080"

// MinRemoteSecret is the fewest bytes a bearer token or basic-auth password
// must have for Serve to listen on a non-loopback address.
const MinRemoteSecret = 16

// Options configure Serve.
type Options struct {
	// AllowRemote lets Serve listen on an address that is not loopback
	// (e.g. ":8080" or "0.0.0.0:8080"). It is refused anyway when the
	// dashboard has no BearerToken or basic auth.
	AllowRemote bool

	// BearerToken, BasicAuthUser and BasicAuthPassword are the
	// dashboard's credentials (dashboard.Options), checked before
	// listening on a non-loopback address.
	BearerToken, BasicAuthUser, BasicAuthPassword string

	// Ready, if set, is called with the listening address once requests
	// are accepted (useful with port 0).
	Ready func(net.Addr)

	// ShutdownTimeout bounds the graceful shutdown when ctx is done. 0
	// means 5s.
	ShutdownTimeout time.Duration

	// TLSConfig, when set, makes Serve speak HTTPS with its certificates;
	// TLS 1.2 is the minimum.
	TLSConfig *tls.Config
}

// ErrNotLoopback is wrapped by Serve when the address is not loopback and
// remote access was not allowed (or is not safe: no authentication).
var ErrNotLoopback = errors.New("dashboard: address is not loopback")

// ErrWeakCredentials is wrapped by Serve when remote access is allowed but a
// bearer token or basic-auth password is shorter than MinRemoteSecret.
var ErrWeakCredentials = errors.New("dashboard: credentials too short for remote access")

type hostKey struct{}

// Host returns, for a request Serve accepted on a non-loopback address,
// the host name that address gives ("" for an IP address or every
// interface), and whether it was so accepted.
func Host(ctx context.Context) (name string, ok bool) {
	p, _ := ctx.Value(hostKey{}).(*string)
	if p == nil {
		return "", false
	}
	return *p, true
}

// Serve serves h (the dashboard) on addr ("" means DefaultAddr) until ctx
// is done, then shuts down gracefully and returns nil. It refuses, before
// listening, an address that is not loopback unless opts.AllowRemote is
// set and the dashboard requires authentication (the error wraps
// ErrNotLoopback) with secrets of at least MinRemoteSecret bytes
// (ErrWeakCredentials). On a non-loopback address, requests may also name
// the address they reached (or the host name addr gives) in their Host
// header, besides loopback names and the dashboard's AllowedHosts.
func Serve(ctx context.Context, addr string, h http.Handler, opts Options) error {
	if h == nil {
		return errors.New("dashboard: Serve: nil dashboard")
	}
	if addr == "" {
		addr = DefaultAddr
	}
	host, err := checkAddr(addr, opts)
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if opts.TLSConfig != nil {
		tlsConfig = opts.TLSConfig.Clone()
		if len(tlsConfig.Certificates) == 0 && tlsConfig.GetCertificate == nil && tlsConfig.GetConfigForClient == nil {
			return errors.New("dashboard: the TLS config has no certificate")
		}
		tlsConfig.MinVersion = max(tlsConfig.MinVersion, tls.VersionTLS12)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if !isLoopback(host) {
		name := ""
		if net.ParseIP(host) == nil {
			name = strings.ToLower(host)
		}
		srv.BaseContext = func(net.Listener) context.Context { return context.WithValue(context.Background(), hostKey{}, &name) }
	}
	done := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			done <- srv.ServeTLS(ln, "", "")
			return
		}
		done <- srv.Serve(ln)
	}()
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

// checkAddr enforces the loopback rule of Serve and returns the address's
// host ("" for every interface).
func checkAddr(addr string, opts Options) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("dashboard: address %q: %w", addr, err)
	}
	if isLoopback(host) {
		return host, nil
	}
	switch {
	case !opts.AllowRemote:
		return "", fmt.Errorf("%w: %q would accept connections from other machines; use 127.0.0.1, or allow remote access and set a token or basic auth", ErrNotLoopback, addr)
	case opts.BearerToken == "" && opts.BasicAuthUser == "":
		return "", fmt.Errorf("%w: %q is open to other machines but no token or basic auth is set", ErrNotLoopback, addr)
	case opts.BearerToken != "" && len(opts.BearerToken) < MinRemoteSecret:
		return "", fmt.Errorf("%w: the bearer token has %d bytes; remote access needs at least %d (e.g. 32 random bytes, base64)", ErrWeakCredentials, len(opts.BearerToken), MinRemoteSecret)
	case opts.BasicAuthPassword != "" && len(opts.BasicAuthPassword) < MinRemoteSecret:
		return "", fmt.Errorf("%w: the basic-auth password has %d bytes; remote access needs at least %d", ErrWeakCredentials, len(opts.BasicAuthPassword), MinRemoteSecret)
	}
	return host, nil
}

// isLoopback reports whether host is "localhost" or a loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
