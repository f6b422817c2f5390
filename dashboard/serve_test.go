package dashboard_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/dashserve"
)

func newDashboard(t *testing.T, opts dashboard.Options) *dashboard.Dashboard {
	t.Helper()
	rdb, ns := redistestNew(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestServeRefusesRemoteAddresses(t *testing.T) {
	t.Parallel()
	open := newDashboard(t, dashboard.Options{})
	locked := newDashboard(t, dashboard.Options{BearerToken: "t"})
	for _, c := range []struct {
		addr        string
		d           *dashboard.Dashboard
		allowRemote bool
	}{
		{":0", open, false},
		{"0.0.0.0:0", open, false},
		{"[::]:0", open, false},
		{"192.0.2.1:0", locked, false},
		{"0.0.0.0:0", open, true}, // remote but no authentication
	} {
		err := dashserve.Serve(t.Context(), c.addr, c.d, dashserve.Options{AllowRemote: c.allowRemote})
		if !errors.Is(err, dashserve.ErrNotLoopback) {
			t.Errorf("Serve(%q, remote %v): %v, want ErrNotLoopback", c.addr, c.allowRemote, err)
		}
	}
	if err := dashserve.Serve(t.Context(), "nonsense", open, dashserve.Options{}); err == nil || errors.Is(err, dashserve.ErrNotLoopback) {
		t.Errorf("bad address: %v", err)
	}
	if err := dashserve.Serve(t.Context(), "", nil, dashserve.Options{}); err == nil {
		t.Error("nil dashboard: no error")
	}
}

// serve runs Serve in the background and returns the address it listens
// on and a stop function that waits for it to return.
func serve(t *testing.T, addr string, d *dashboard.Dashboard, opts dashserve.Options) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	opts.Ready = func(a net.Addr) { ready <- a }
	done := make(chan error, 1)
	go func() { done <- dashserve.Serve(ctx, addr, d, opts) }()
	select {
	case a := <-ready:
		return a.String(), func() error { cancel(); return <-done }
	case err := <-done:
		cancel()
		t.Fatalf("Serve(%q): %v", addr, err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("Serve did not start within 10s")
	}
	return "", nil
}

func TestServeLoopbackAndShutdown(t *testing.T) {
	t.Parallel()
	d := newDashboard(t, dashboard.Options{})
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		got, stop := serve(t, addr, d, dashserve.Options{})
		c := testClient(t)
		res, err := c.Get("http://" + got + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		c.CloseIdleConnections()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: GET / = %d", addr, res.StatusCode)
		}
		if err := stop(); err != nil {
			t.Fatalf("%s: Serve returned %v after ctx was cancelled", addr, err)
		}
		if _, err := c.Get("http://" + got + "/"); err == nil {
			t.Fatalf("%s: still serving after shutdown", addr)
		}
	}
	// A port in use is an error, not a hang.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := dashserve.Serve(t.Context(), ln.Addr().String(), d, dashserve.Options{}); err == nil {
		t.Fatal("Serve on a port in use: no error")
	}
}

// selfSigned returns a TLS config with a fresh self-signed certificate for
// 127.0.0.1 and localhost, and a pool that trusts it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM := selfSignedPEM(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}}, pool
}

func selfSignedPEM(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "delayq dashboard test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func tlsClient(t *testing.T, pool *x509.CertPool) *http.Client {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestHSTSOverTLS: over TLS every answer for a name that is not loopback
// (a page, a 401, a static file) carries Strict-Transport-Security for a
// year, without includeSubDomains; loopback names and plain HTTP get none.
func TestHSTSOverTLS(t *testing.T) {
	t.Parallel()
	d := newDashboard(t, dashboard.Options{AllowedHosts: []string{"ops.example"}, BearerToken: "a-token-0123456789"})
	cfg, pool := selfSigned(t)
	addr, stop := serve(t, "127.0.0.1:0", d, dashserve.Options{TLSConfig: cfg})
	t.Cleanup(func() { _ = stop() })
	client := tlsClient(t, pool)
	get := func(scheme, host, path string, auth bool) *http.Response {
		t.Helper()
		c := client
		if scheme == "http" {
			c = testClient(t)
		}
		req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if auth {
			req.Header.Set("Authorization", "Bearer a-token-0123456789")
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, res)
		res.Body.Close()
		return res
	}
	for _, c := range []struct {
		host, path string
		auth       bool
		status     int
	}{
		{"ops.example", "/", true, http.StatusOK},
		{"ops.example:8443", "/dead", true, http.StatusOK},
		{"ops.example", "/", false, http.StatusUnauthorized},
		{"ops.example", "/static/dashboard.css", true, http.StatusOK},
	} {
		res := get("https", c.host, c.path, c.auth)
		if res.StatusCode != c.status || res.Header.Get("Strict-Transport-Security") != "max-age=31536000" {
			t.Errorf("GET https://%s%s: %d, Strict-Transport-Security %q; want %d and max-age=31536000",
				c.host, c.path, res.StatusCode, res.Header.Get("Strict-Transport-Security"), c.status)
		}
	}
	for _, host := range []string{"localhost", "127.0.0.1", addr, "evil.example"} {
		if res := get("https", host, "/", true); res.Header.Get("Strict-Transport-Security") != "" {
			t.Errorf("GET https://%s/: Strict-Transport-Security %q, want none", host, res.Header.Get("Strict-Transport-Security"))
		}
	}
	plain := setup(t, dashboard.Options{AllowedHosts: []string{"ops.example"}})
	if r := plain.hostDo(t, "ops.example", http.MethodGet, "/", nil); r.status != http.StatusOK || r.header.Get("Strict-Transport-Security") != "" {
		t.Errorf("GET over plain HTTP: %d, Strict-Transport-Security %q, want 200 and none", r.status, r.header.Get("Strict-Transport-Security"))
	}
}

// Serve with a TLS config speaks HTTPS only.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	d := newDashboard(t, dashboard.Options{})
	cfg, pool := selfSigned(t)
	addr, stop := serve(t, "127.0.0.1:0", d, dashserve.Options{TLSConfig: cfg})
	res, err := tlsClient(t, pool).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, res)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.TLS == nil || !strings.Contains(body, "delayq") {
		t.Fatalf("GET over TLS: %d, TLS %v", res.StatusCode, res.TLS != nil)
	}
	if res.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("TLS version %x", res.TLS.Version)
	}
	plain := testClient(t)
	if res, err := plain.Get("http://" + addr + "/"); err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served on the TLS port")
		}
	}
	plain.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := dashserve.Serve(t.Context(), "127.0.0.1:0", d, dashserve.Options{TLSConfig: &tls.Config{}}); err == nil {
		t.Fatal("a TLS config without a certificate: no error")
	}
}

// nonLoopbackIP returns an IPv4 address of this machine that is not
// loopback, or skips the test.
func nonLoopbackIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address")
	return nil
}

// On a non-loopback address Serve needs long secrets, and answers to the
// address a connection reached (and loopback names, and AllowedHosts), not
// to other names.
func TestServeRemoteHosts(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	weak := newDashboard(t, dashboard.Options{BearerToken: "short"})
	if err := dashserve.Serve(t.Context(), ip.String()+":0", weak, dashserve.Options{AllowRemote: true, BearerToken: "short"}); !errors.Is(err, dashserve.ErrWeakCredentials) {
		t.Fatalf("Serve with a 5-byte token: %v, want ErrWeakCredentials", err)
	}
	const token = "remote-token-0123456789"
	d := newDashboard(t, dashboard.Options{BearerToken: token, AllowedHosts: []string{"ops.example.com"}})
	for _, bind := range []string{ip.String() + ":0", "0.0.0.0:0"} {
		addr, stop := serve(t, bind, d, dashserve.Options{AllowRemote: true, BearerToken: token})
		c := testClient(t)
		_, port, _ := net.SplitHostPort(addr)
		target := net.JoinHostPort(ip.String(), port)
		for host, want := range map[string]int{
			target:                               http.StatusOK,
			ip.String():                          http.StatusOK,
			"ops.example.com":                    http.StatusOK,
			"evil.example:" + port:               http.StatusMisdirectedRequest,
			"192.0.2.254:" + port:                http.StatusMisdirectedRequest,
			"dashboard.internal.example:" + port: http.StatusMisdirectedRequest,
		} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+target+"/", nil)
			req.Host = host
			req.Header.Set("Authorization", "Bearer "+token)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != want {
				t.Errorf("bound to %s, Host %s: %d, want %d", bind, host, res.StatusCode, want)
			}
		}
		c.CloseIdleConnections()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}
