package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redistest"
)

// TestACLUser connects as an ACL user with the rights the runbook lists,
// restricted to the default namespace's keys and channels.
func TestACLUser(t *testing.T) {
	t.Parallel()
	rule := "delayq on >s3cret ~delayq:* &delayq:* +@read +@write +@scripting +@pubsub +@connection +@transaction +time +config|get"
	srv := redistest.Start(t, append([]string{"--user"}, strings.Fields(rule)...)...)
	env := []string{"REDIS_URL=redis://delayq:s3cret@" + srv.Addr() + "/0"}
	for _, args := range [][]string{
		{"enqueue", "--type", "t", "--payload", "{}", "--id", "a1", "--in", "1h"},
		{"jobs", "reschedule", "a1", "--in", "2h"},
		{"jobs", "show", "a1"},
		{"stats"},
		{"jobs", "cancel", "a1"},
		{"dead", "ls"},
		{"dead", "trim"},
	} {
		if r := runBinary(t, env, "", args...); r.code != 0 {
			t.Fatalf("delayq %q as an ACL user: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	// Another namespace is outside the user's keys: refused, in one line.
	r := runBinary(t, env, "", "enqueue", "--type", "t", "--payload", "{}", "--namespace", "other")
	if r.code != 1 || !strings.Contains(r.stderr, "NOPERM") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("enqueue outside the user's keys: %+v", r)
	}
}

// TestTLS connects with rediss:// to a server that speaks only TLS, trusting
// its certificate through SSL_CERT_FILE.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	port := freePort(t)
	srv := redistest.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	t.Logf("plain port %s, TLS port %d", srv.Addr(), port)
	url := "rediss://127.0.0.1:" + strconv.Itoa(port) + "/0"
	r := runBinary(t, []string{"REDIS_URL=" + url, "SSL_CERT_FILE=" + certFile}, "", "enqueue", "--type", "t", "--payload", "{}", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"ready_at"`) {
		t.Fatalf("enqueue over TLS: %+v", r)
	}
	r = runBinary(t, []string{"REDIS_URL=" + url, "SSL_CERT_FILE=" + certFile}, "", "stats", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"scheduled":1`) {
		t.Fatalf("stats over TLS: %+v", r)
	}
	// Without trusting the certificate the connection is refused.
	r = runBinary(t, []string{"REDIS_URL=" + url, "SSL_CERT_FILE=" + filepath.Join(dir, "none.pem")}, "", "stats")
	if r.code != 1 || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("stats with an untrusted certificate: %+v", r)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "delayq test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
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
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
