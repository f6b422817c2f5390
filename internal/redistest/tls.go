package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// StartTLS is [Start] for a redis-server that accepts only TLS: it listens
// with --tls-port on a free 127.0.0.1 port and --port 0, presenting the
// certificate in certFile and keyFile, which must be valid for the IP address
// 127.0.0.1 and signed by the CA in caFile. Clients are not asked for
// certificates unless args say so (e.g. "--tls-auth-clients", "yes"). Kill,
// Stop and Restart work as for Start; [Server.Client] and [Server.TLSConfig]
// give clients that trust caFile.
func StartTLS(t testing.TB, certFile, keyFile, caFile string, args ...string) *Server {
	t.Helper()
	bin, err := ServerBinary()
	if err != nil {
		t.Fatalf("redistest: StartTLS: %v", err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("redistest: StartTLS: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("redistest: StartTLS: no PEM certificate in %s", caFile)
	}
	conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	dir := t.TempDir()
	s := &Server{bin: bin, dir: dir, logPath: logFile(dir), tls: conf}
	s.dial = func(addr string) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, conf.Clone())
	}
	for range portAttempts {
		port, perr := freePort()
		if perr != nil {
			t.Fatalf("redistest: StartTLS: %v", perr)
		}
		s.args = append([]string{
			"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
			"--tls-auth-clients", "no",
		}, slices.Clone(args)...)
		var p *process
		if p, err = launch(bin, dir, s.logPath, port, s.args, s.dial); err == nil {
			s.proc, s.port = p, port
			t.Cleanup(s.Kill)
			return s
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	t.Fatalf("redistest: start redis-server with TLS: %v\n--- last lines of redis-server output ---\n%s",
		err, logTail(s.logPath, logTailLines))
	return nil
}

// TLSConfig returns a copy of the client TLS configuration that trusts the
// server's CA, or nil for a server started by [Start].
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

// URL returns the server's URL: rediss:// for a TLS server, redis://
// otherwise. A client parsed from it needs [Server.TLSConfig]'s RootCAs to
// trust a TLS server.
func (s *Server) URL() string {
	scheme := "redis"
	if s.tls != nil {
		scheme = "rediss"
	}
	return fmt.Sprintf("%s://%s/0", scheme, s.Addr())
}
