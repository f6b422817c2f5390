package faulttest_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// writeCerts makes a CA and a server certificate for 127.0.0.1 signed by it,
// and writes them as PEM files into dir.
func writeCerts(t *testing.T, dir string) (cert, key, ca string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "delayq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("server.crt", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER), write("ca.crt", "CERTIFICATE", caDER)
}

// coreFlow runs every broker operation a deployment uses against b: enqueue,
// a worker that handles, retries and dead-letters, the dead-letter
// inspector (list, get, redrive, delete, purge), cancel, reschedule, stats
// and the queue list. It fails t on the first error.
func coreFlow(t *testing.T, b *broker.Broker) {
	t.Helper()
	ctx := context.Background()
	const q = "secure"
	typ := job.New[crashArgs]("secure.flow", job.Queue(q), job.MaxRetries(1), job.Retry(retry.Constant(10*time.Millisecond)))
	var mu sync.Mutex
	handled := map[int]int{}
	reg := job.NewRegistry()
	typ.Handle(reg, func(ctx context.Context, j *job.Job[crashArgs]) error {
		mu.Lock()
		handled[j.Args.N]++
		n := handled[j.Args.N]
		mu.Unlock()
		switch {
		case j.Args.Poison:
			return errors.New("always fails")
		case j.Args.N == 1 && n == 1:
			return errors.New("fails once")
		}
		return nil
	})
	stop := runWorker(t, worker.Config{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: q}}, Lease: 5 * time.Second, MaxIdle: 100 * time.Millisecond})
	for i, a := range []crashArgs{{N: 0}, {N: 1}, {N: 2, Poison: true}} {
		if _, err := typ.Enqueue(ctx, b, a, job.In(time.Duration(i)*10*time.Millisecond)); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	later, err := typ.Enqueue(ctx, b, crashArgs{N: 3}, job.In(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reschedule(ctx, q, later.ID, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatalf("reschedule: %v", err)
	}
	if err := b.Cancel(ctx, q, later.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	in := deadletter.New(b)
	var dead []*broker.DeadRecord
	redistest.WaitFor(t, 10*time.Second, "two handled, one dead", func() bool {
		page, err := in.List(ctx, q, deadletter.ListOptions{})
		if err != nil {
			t.Fatalf("dead-letter list: %v", err)
		}
		dead = page.Records
		mu.Lock()
		defer mu.Unlock()
		return handled[0] == 1 && handled[1] == 2 && len(dead) == 1
	})
	if _, err := in.Get(ctx, q, dead[0].ID); err != nil {
		t.Fatalf("dead-letter get: %v", err)
	}
	if err := b.Redrive(ctx, q, 0, dead[0].ID); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	redistest.WaitFor(t, 10*time.Second, "redriven job dead again", func() bool {
		st, err := b.Stats(ctx, q)
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		return st.Dead == 1 && st.Scheduled == 0 && st.Processing == 0
	})
	stop()
	if err := b.DeadDelete(ctx, q, dead[0].ID); err != nil {
		t.Fatalf("dead-letter delete: %v", err)
	}
	if _, err := b.DeadPurge(ctx, q); err != nil {
		t.Fatalf("dead-letter purge: %v", err)
	}
	if _, err := b.DeadTrim(ctx, q); err != nil {
		t.Fatalf("dead-letter trim: %v", err)
	}
	if qs, err := b.Queues(ctx); err != nil || len(qs) != 1 || qs[0] != q {
		t.Fatalf("queues = %v, %v", qs, err)
	}
}

// TestTLS runs the core flow over rediss:// against a redis-server that
// only speaks TLS, with certificates made here; a plain connection is
// refused.
func TestTLS(t *testing.T) {
	t.Parallel()
	cert, key, ca := writeCerts(t, t.TempDir())
	srv := redistest.StartTLS(t, cert, key, ca)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig == nil || !strings.HasPrefix(srv.URL(), "rediss://") {
		t.Fatalf("URL %s does not ask for TLS", srv.URL())
	}
	opts.TLSConfig.RootCAs = srv.TLSConfig().RootCAs
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Namespace: "tls"})
	if err != nil {
		t.Fatal(err)
	}
	coreFlow(t, b)

	plain := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = plain.Close() })
	if err := plain.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a plain TCP client got an answer from the TLS-only server")
	}
	untrusting := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: opts.TLSConfig.Clone(), MaxRetries: -1})
	untrusting.Options().TLSConfig.RootCAs = nil
	t.Cleanup(func() { _ = untrusting.Close() })
	if err := untrusting.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a client that does not trust the CA connected")
	}
}

// TestACLUserLimitedToNamespace creates a Redis user with broker.ACLRules
// for one namespace and runs the core flow as that user; keys and channels
// outside the namespace, and commands delayq does not send, are refused.
func TestACLUserLimitedToNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const ns = "tenant-a"
	args := []any{"ACL", "SETUSER", "delayq-a", "reset", "on", ">s3cret"}
	for _, r := range strings.Fields(broker.ACLRules(ns)) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER with %q: %v", broker.ACLRules(ns), err)
	}
	if err := admin.Set(ctx, "other:secret", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "delayq-a", Password: "s3cret"})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	coreFlow(t, b)

	noperm := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s as the namespace's user: %v, want NOPERM", what, err)
		}
	}
	noperm("GET other:secret", rdb.Get(ctx, "other:secret").Err())
	noperm("SET other:x", rdb.Set(ctx, "other:x", "y", 0).Err())
	noperm("FLUSHALL", rdb.FlushAll(ctx).Err())
	noperm("KEYS", rdb.Keys(ctx, "*").Err())
	noperm("CONFIG GET", rdb.ConfigGet(ctx, "dir").Err())
	noperm("PUBLISH other", rdb.Publish(ctx, "other:{q}:wake", "x").Err())
	other, err := broker.New(rdb, broker.Options{Namespace: "tenant-b"})
	if err != nil {
		t.Fatal(err)
	}
	noperm("Enqueue in another namespace", other.Enqueue(ctx, &job.Envelope{Type: "x", Payload: []byte(`{}`)}))
	if n, err := admin.Keys(ctx, "tenant-b*").Result(); err != nil || len(n) != 0 {
		t.Errorf("keys of the other namespace written: %v, %v", n, err)
	}
	if v, err := admin.Get(ctx, "other:secret").Result(); err != nil || v != "x" {
		t.Errorf("other:secret = %q, %v", v, err)
	}
}

// TestPayloadIsData enqueues payloads that look like Lua, Redis commands,
// RESP and envelopes; each reaches its handler byte for byte and nothing
// else in Redis changes.
func TestPayloadIsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	canary := ns + ":canary"
	if err := rdb.Set(ctx, canary, "alive", 0).Err(); err != nil {
		t.Fatal(err)
	}
	payloads := []string{
		`redis.call('FLUSHALL')`,
		`"]]; redis.call('DEL', KEYS[1]); --"`,
		`{"lua":"return redis.call('SET', KEYS[1], 'pwned')","<b>":"&amp;"}`,
		"*1\r\n$8\r\nFLUSHALL\r\n",
		"EVAL \"redis.call('FLUSHDB')\" 0",
		`{"t":"other.type","p":{"x":1},"r":999,"to":1}`,
		`{ "spaced" : [ 1 , 2 ] }`,
		"\x00\xff\\'\"`$(rm -rf /)",
	}
	var mu sync.Mutex
	got := map[string][]byte{}
	reg := job.NewRegistry()
	if err := reg.Register("data.only", job.Entry{Handler: job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		mu.Lock()
		got[m.ID] = bytes.Clone(m.Payload)
		mu.Unlock()
		return nil
	})}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, worker.Config{Broker: b, Registry: reg, MaxIdle: 100 * time.Millisecond})
	for i, p := range payloads {
		if err := b.Enqueue(ctx, &job.Envelope{ID: "p" + string(rune('a'+i)), Type: "data.only", Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "every payload handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(payloads)
	})
	for i, p := range payloads {
		if id := "p" + string(rune('a'+i)); !bytes.Equal(got[id], []byte(p)) {
			t.Errorf("payload %q reached the handler as %q", p, got[id])
		}
	}
	if v, err := rdb.Get(ctx, canary).Result(); err != nil || v != "alive" {
		t.Fatalf("canary key = %q, %v: a payload was executed", v, err)
	}
}

// TestSecurityDocShowsACLRules keeps docs/security.md's ACL line in step
// with broker.ACLRules.
func TestSecurityDocShowsACLRules(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ACL SETUSER delayq reset on >password " + broker.ACLRules("delayq") + "\n"; !strings.Contains(string(doc), want) {
		t.Fatalf("docs/security.md does not show the line\n%s", want)
	}
}
