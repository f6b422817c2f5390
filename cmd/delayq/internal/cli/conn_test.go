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
// restricted to the default namespace's keys and channels. The server
// starts users with every channel, as Redis 6.2 does (7.0 starts them with
// none), so the rule must reset the channels before its pattern.
func TestACLUser(t *testing.T) {
	t.Parallel()
	rule := "delayq on >s3cret ~delayq:* resetchannels &delayq:* +@read +@write +@scripting +@pubsub +@connection +@transaction +time +config|get"
	srv := redistest.Start(t, append([]string{"--acl-pubsub-default", "allchannels", "--user"}, strings.Fields(rule)...)...)
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

// The TLS schemes of clusters and Sentinels speak TLS to the addresses in
// the URL, and check their certificate: against a TLS server that is
// neither a cluster node nor a Sentinel, a trusted certificate gets as far
// as that server's answer, an untrusted one stops at the handshake, and
// the plain schemes get no answer at all.
func TestTLSClusterAndSentinelSchemes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	port := freePort(t)
	redistest.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	addr := "127.0.0.1:" + strconv.Itoa(port)
	trusted, untrusted := "SSL_CERT_FILE="+certFile, "SSL_CERT_FILE="+filepath.Join(dir, "none.pem")
	for _, c := range []struct {
		url, certs, want string
	}{
		{"rediss+cluster://" + addr, trusted, "ERR This instance has cluster support disabled"},
		{"rediss+cluster://" + addr, untrusted, "certificate"},
		{"redis+cluster://" + addr, trusted, "cannot connect to Redis Cluster at " + addr}, // and no answer
		{"rediss+sentinel://" + addr + "/mymaster", trusted, "unknown command"},
		{"rediss+sentinel://" + addr + "/mymaster", untrusted, "certificate"},
	} {
		r := runBinary(t, []string{"REDIS_URL=" + c.url, c.certs}, "", "stats")
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || c.url[:6] != "rediss" && strings.Contains(r.stderr, "cluster support") {
			t.Errorf("%s with %s: exit %d, stderr %q; want exit 1 and %q", c.url, c.certs, r.code, r.stderr, c.want)
		}
	}
}

// eachWay runs delayq args with the Redis URL given through REDIS_URL
// ("env") and through --redis-url ("flag").
func eachWay(t *testing.T, url string, args ...string) map[string]result {
	t.Helper()
	return map[string]result{
		"env":  runBinary(t, []string{"REDIS_URL=" + url}, "", args...),
		"flag": runBinary(t, nil, "", append(args, "--redis-url", url)...),
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

// Malformed cluster and Sentinel URLs are bad usage (exit 2) with an error
// that names the part that is wrong and never shows the password, whether
// the URL comes from REDIS_URL or --redis-url.
func TestClusterAndSentinelURLErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"redis+cluster://", `"redis+cluster://": no address of a cluster node: want redis+cluster://[user[:password]@]host:port[,host:port…]`},
		{"redis+cluster://ops:SuperSecretPw@", `"redis+cluster://ops:xxxxx@": no address of a cluster node`},
		{"redis+cluster://ops:SuperSecretPw@10.0.0.1:7000,,10.0.0.2:7000", "an empty address in the list"},
		{"redis+cluster://ops:SuperSecretPw@10.0.0.1:7000,10.0.0.2:notaport", `address "10.0.0.2:notaport": invalid port "notaport"`},
		{"redis+cluster://ops:SuperSecretPw@10.0.0.1:99999", `address "10.0.0.1:99999": invalid port "99999"`},
		{"redis+cluster://ops:SuperSecretPw@:7000", `address ":7000": missing or malformed host`},
		{"redis+cluster://ops:SuperSecretPw@10.0.0.1:7000/3", "a cluster has only database 0: remove the path /3"},
		{"redis+cluster://ops:Super/Secret?Pw@10.0.0.1:7000", `"redis+cluster://ops:xxxxx@10.0.0.1:7000": its user or password does not parse`},
		{"redis+cluster://ops:Super%zzSecretPw@10.0.0.1:7000", "its user or password does not parse"},
		{"redis+cluster://ops:SuperSecretPw@10.0.0.1:7000?pool=3", `unknown option "pool" (known: client_name, dial_timeout, protocol, read_timeout, write_timeout)`},
		{"redis+cluster://ops:SuperSecretPw@10.0.0.1:7000?dial_timeout=soon", `invalid option dial_timeout="soon": want a positive duration`},
		{"redis+cluster://ops:SuperSecretPw@10.0.0.1:7000?protocol=4", `invalid option protocol="4": want 2 or 3`},
		{"redis+sentinel://ops:SuperSecretPw@10.0.0.1:26379", `"redis+sentinel://ops:xxxxx@10.0.0.1:26379": missing master name: want redis+sentinel://[user[:password]@]host:port[,host:port…]/MASTER[/DB]`},
		{"redis+sentinel://ops:SuperSecretPw@10.0.0.1:26379,10.0.0.2:26379/", "missing master name"},
		{"redis+sentinel://ops:SuperSecretPw@10.0.0.1:26379?client_name=x", "missing master name"},
		{"redis+sentinel://ops:SuperSecretPw@/mymaster", "no address of a Sentinel"},
		{"redis+sentinel://ops:SuperSecretPw@10.0.0.1:26379/mymaster/first", `invalid database number "first" after the master name`},
		{"redis+sentinel://ops:SuperSecretPw@10.0.0.1:26379/mymaster#main", "unexpected #main"},
		{"rediss+sentinel://ops:SuperSecretPw@10.0.0.1:26379/mymaster/0/extra", `invalid database number "0/extra"`},
	} {
		for how, r := range eachWay(t, c.url, "stats") {
			if r.code != 2 || !strings.HasPrefix(r.stderr, "delayq: invalid --redis-url: ") || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s %q: exit %d, stderr %q; want exit 2 and %q", how, c.url, r.code, r.stderr, c.want)
			}
			if strings.Contains(r.stdout+r.stderr, "Super") || strings.Contains(r.stdout+r.stderr, "Secret") {
				t.Errorf("%s %q: the output shows the password: %q", how, c.url, r.stderr)
			}
		}
	}
}

// A cluster or Sentinel URL that reaches no cluster or no master fails with
// exit status 1, saying where it tried, without the password.
func TestClusterAndSentinelUnreachable(t *testing.T) {
	t.Parallel()
	plain := redistest.Start(t) // a server that is neither a cluster node nor a Sentinel
	for _, c := range []struct{ url, want string }{
		{"redis+cluster://ops:SuperSecretPw@127.0.0.1:1", "cannot connect to Redis Cluster at 127.0.0.1:1: "},
		{"redis+cluster://" + plain.Addr(), "cannot connect to Redis Cluster at " + plain.Addr() + ": ERR This instance has cluster support disabled"},
		{"redis+sentinel://ops:SuperSecretPw@127.0.0.1:1/mymaster", `cannot connect to Redis master "mymaster" through the Sentinels at 127.0.0.1:1: `},
		{"redis+sentinel://" + plain.Addr() + "/mymaster", `cannot connect to Redis master "mymaster" through the Sentinels at ` + plain.Addr() + ": "},
	} {
		r := runBinary(t, []string{"REDIS_URL=" + c.url}, "", "stats")
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "Secret") {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 and %q", c.url, r.code, r.stderr, c.want)
		}
	}
}
