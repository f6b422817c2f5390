package dashboard

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

// defaultAddr is where Serve listens when given no address: loopback only
// (the CLI's --addr default too).
const defaultAddr = "127.0.0.1:8080"

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

	// TLSConfig, when set, makes Serve speak HTTPS with its certificates
	// (e.g. from tls.LoadX509KeyPair); TLS 1.2 is the minimum. The CSRF
	// cookie is then Secure and named with the __Host- prefix. Without it,
	// a remote dashboard sends credentials in clear text: put it behind a
	// TLS-terminating proxy then.
	TLSConfig *tls.Config
}

// ErrNotLoopback is wrapped by Serve when the address is not loopback and
// remote access was not allowed (or is not safe: no authentication).
var ErrNotLoopback = errors.New("dashboard: address is not loopback")

// ErrWeakCredentials is wrapped by Serve when remote access is allowed but a
// bearer token or basic-auth password is shorter than 16 bytes.
var ErrWeakCredentials = errors.New("dashboard: credentials too short for remote access")

// minRemoteSecret is the fewest bytes a bearer token or basic-auth password
// must have for Serve to listen on a non-loopback address.
const minRemoteSecret = 16

// Serve serves d on addr ("" means "127.0.0.1:8080") until ctx is done, then shuts
// down gracefully and returns nil. It refuses, before listening, an address
// that is not loopback unless opts.AllowRemote is set and the dashboard
// requires authentication (the error wraps ErrNotLoopback) with secrets of
// at least 16 bytes (ErrWeakCredentials). On a non-loopback
// address, requests may also name the address they reached (or the host
// name addr gives) in their Host header, besides loopback names and
// Options.AllowedHosts.
func Serve(ctx context.Context, addr string, d *Dashboard, opts ServeOptions) error {
	if d == nil {
		return errors.New("dashboard: Serve: nil dashboard")
	}
	if addr == "" {
		addr = defaultAddr
	}
	host, err := checkAddr(addr, opts.AllowRemote, d)
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if opts.TLSConfig != nil {
		tlsConfig = opts.TLSConfig.Clone()
		if len(tlsConfig.Certificates) == 0 && tlsConfig.GetCertificate == nil && tlsConfig.GetConfigForClient == nil {
			return errors.New("dashboard: ServeOptions.TLSConfig has no certificate")
		}
		tlsConfig.MinVersion = max(tlsConfig.MinVersion, tls.VersionTLS12)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           d,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if !isLoopback(host) {
		sh := &serveHosts{}
		if net.ParseIP(host) == nil {
			sh.name = strings.ToLower(host)
		}
		srv.BaseContext = func(net.Listener) context.Context { return withServeHosts(context.Background(), sh) }
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
func checkAddr(addr string, allowRemote bool, d *Dashboard) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("dashboard: address %q: %w", addr, err)
	}
	if isLoopback(host) {
		return host, nil
	}
	switch {
	case !allowRemote:
		return "", fmt.Errorf("%w: %q would accept connections from other machines; use 127.0.0.1, or allow remote access and set a token or basic auth", ErrNotLoopback, addr)
	case len(d.admitted) == 0:
		return "", fmt.Errorf("%w: %q is open to other machines but no token or basic auth is set", ErrNotLoopback, addr)
	case d.opts.BearerToken != "" && len(d.opts.BearerToken) < minRemoteSecret:
		return "", fmt.Errorf("%w: the bearer token has %d bytes; remote access needs at least %d (e.g. 32 random bytes, base64)", ErrWeakCredentials, len(d.opts.BearerToken), minRemoteSecret)
	case d.opts.BasicAuthPassword != "" && len(d.opts.BasicAuthPassword) < minRemoteSecret:
		return "", fmt.Errorf("%w: the basic-auth password has %d bytes; remote access needs at least %d", ErrWeakCredentials, len(d.opts.BasicAuthPassword), minRemoteSecret)
	}
	return host, nil
}
