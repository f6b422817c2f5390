package faulttest_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	dqadmin "github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testkit"
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
	stop := runWorker(t, worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: q}}, Lease: 5 * time.Second, MaxIdle: 100 * time.Millisecond})
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
	if _, err := b.Cancel(ctx, q, later.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	in := deadletter.New(b)
	var dead []*job.DeadRecord
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
	if err := deadletter.New(b).Redrive(ctx, q, 0, dead[0].ID); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	redistest.WaitFor(t, 10*time.Second, "redriven job dead again", func() bool {
		st, err := testkit.OneStats(b.Stats(ctx, q))
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		return st.Dead == 1 && st.Scheduled == 0 && st.Processing == 0
	})
	stop()
	if err := deadletter.New(b).Delete(ctx, q, dead[0].ID); err != nil {
		t.Fatalf("dead-letter delete: %v", err)
	}
	if _, err := deadletter.New(b).DeleteAll(ctx, q, deadletter.Filter{}, deadletter.BulkOptions{}); err != nil {
		t.Fatalf("dead-letter purge: %v", err)
	}
	if _, err := deadletter.New(b).Trim(ctx, q); err != nil {
		t.Fatalf("dead-letter trim: %v", err)
	}
	if qs, err := protocol.Admin(b).Queues(ctx); err != nil || len(qs) != 1 || qs[0] != q {
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

// TestACLUserLimitedToNamespace creates a Redis user with admin.ACLRules
// for one namespace and runs the core flow as that user; keys and channels
// outside the namespace, and commands delayq does not send, are refused.
func TestACLUserLimitedToNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const ns = "tenant-a"
	args := []any{"ACL", "SETUSER", "delayq-a", "reset", "on", ">s3cret"}
	for _, r := range strings.Fields(dqadmin.ACLRules(ns)) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER with %q: %v", dqadmin.ACLRules(ns), err)
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
	trimFlow(t, rdb, broker.Options{Namespace: ns})

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
	if err := reg.Table(registry.Key{}).Register("data.only", registry.Entry[job.Handler, retry.Policy]{Handler: job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		mu.Lock()
		got[m.ID] = bytes.Clone(m.Payload)
		mu.Unlock()
		return nil
	})}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, worker.Options{Broker: b, Registry: reg, MaxIdle: 100 * time.Millisecond})
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

// TestSecurityDocShowsACLRules keeps docs/security.md's ACL lines in step
// with admin.ACLRules and admin.FunctionsACLRules.
func TestSecurityDocShowsACLRules(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rules := range []string{dqadmin.ACLRules("delayq"), dqadmin.FunctionsACLRules("delayq")} {
		if want := "ACL SETUSER delayq reset on >password " + rules + "\n"; !strings.Contains(string(doc), want) {
			t.Errorf("docs/security.md does not show the line\n%s", want)
		}
	}
}

// hostileJSON is n open brackets then n closing ones, the payload json.Indent
// turned into about n² bytes of page.
func hostileJSON(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// dashboardHeadroom is the address space, in MiB, the dashboard process
// may map beyond what it has mapped once started (setrlimit RLIMIT_AS).
// With json.Indent one 19,996-byte payload took 1.2 GB to show.
const dashboardHeadroom = 256

// firstLines returns the first n lines of s, for a crash's message without
// its goroutine dump.
func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// TestDashboardSurvivesHostilePayloads runs the dashboard in a process of
// its own (cmd/faultdashboard) whose address space is capped at what it
// mapped at start plus 256 MiB, and asks it, three times over, for the
// pages of jobs, dead jobs and results that hold the payloads:
// 9,998 arrays nested in each other (19,996 bytes) and 52 of them in one
// array (1,039,845 bytes, under the default 1 MiB cap). Every page is
// served, the process is still there afterwards, and it stops cleanly; its
// peak resident memory is logged.
func TestDashboardSurvivesHostilePayloads(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the address-space cap needs Linux")
	}
	t.Parallel()
	ctx := context.Background()
	bin := buildCommand(t, "faultdashboard")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const ns, q = "hostile", "q"
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	deep := hostileJSON(9998)
	many := "[" + strings.Repeat(deep+",", 51) + deep + "]"
	payloads := map[string]string{"deep": deep, "many": many}
	var pages []string
	for name, p := range payloads {
		if err := b.Enqueue(ctx,
			&job.Envelope{ID: name + "-scheduled", Queue: q, Type: "t", Payload: []byte(p), Delay: time.Hour},
			&job.Envelope{ID: name + "-dead", Queue: q, Type: "t", Payload: []byte(p)},
			&job.Envelope{ID: name + "-done", Queue: q, Type: "t", Payload: []byte(p)},
		); err != nil {
			t.Fatal(err)
		}
		res, err := testkit.Drive(b).Claim(ctx, q, 2, time.Minute)
		if err != nil || len(res.Jobs) != 2 {
			t.Fatalf("claimed %d of 2: %v", len(res.Jobs), err)
		}
		for _, c := range res.Jobs {
			op := protocol.Op{Kind: protocol.OpAck, Lease: c.Lease, Retain: time.Hour, Done: &protocol.Done{Body: c.Body, Attempts: 1, Result: []byte(p)}}
			if c.ID == name+"-dead" {
				op = protocol.Op{Kind: protocol.OpKill, Lease: c.Lease, Death: protocol.Death{Type: "t", Body: c.Body, Error: p, Attempts: 1}}
			}
			if out, err := testkit.Drive(b).Settle(ctx, op); err != nil || out[0].Err != nil {
				t.Fatalf("settle %s: %v %+v", c.ID, err, out)
			}
		}
		pages = append(pages, "/queues/q/job?id="+name+"-scheduled", "/dead/q/job?id="+name+"-dead", "/queues/q/job?id="+name+"-done")
	}
	pages = append(pages, "/dead", "/queues/q", "/")

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "FAULTDASH_URL=redis://"+srv.Addr()+"/0", "FAULTDASH_NS="+ns, fmt.Sprintf("FAULTDASH_HEADROOM=%d", dashboardHeadroom))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 4)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var addr, limit string
	for addr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("faultdashboard ended before listening: %v\n%s", <-exited, stderr.String())
			}
			if v, ok := strings.CutPrefix(l, "faultdashboard limit "); ok {
				limit = v
			}
			if v, ok := strings.CutPrefix(l, "faultdashboard listening "); ok {
				addr = v
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("faultdashboard did not listen within 30s\n%s", stderr.String())
		}
	}
	// The timeout is a guard against a hang, not a speed target: each
	// page takes milliseconds.
	client := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute} // not http.DefaultTransport, which other tests' servers close idle connections of
	t.Cleanup(client.CloseIdleConnections)
	served := 0
	for round := range 3 {
		for _, p := range pages {
			res, err := client.Get("http://" + addr + p)
			if err != nil {
				t.Fatalf("round %d, GET %s: %v; the dashboard process wrote: %s", round, p, err, firstLines(stderr.String(), 3))
			}
			n, _ := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("round %d, GET %s: %d", round, p, res.StatusCode)
			}
			if round == 0 {
				t.Logf("GET %s: %d bytes", p, n)
			}
			served++
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatalf("the dashboard process is gone after the pages: %v\n%s", err, stderr.String())
	}
	var peak []string
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmPeak:") || strings.HasPrefix(l, "VmHWM:") {
			peak = append(peak, strings.Join(strings.Fields(l), " "))
		}
	}
	t.Logf("%d pages served under an address-space cap of %s bytes (%d MiB above the start); %s", served, limit, dashboardHeadroom, strings.Join(peak, ", "))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("faultdashboard: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("faultdashboard did not stop within 30s of SIGTERM")
	}
}

// aclClient creates user with dqadmin.ACLRules(ns) plus extra rules on srv
// and returns a client logged in as that user.
func aclClient(t *testing.T, srv *redistest.Server, user, rules string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">s3cret"}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	if err := srv.Client(t).Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s %s: %v", user, rules, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "s3cret"})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestJobIDsInKeyNames: the one key named by a job id, ns:{q}:done:<id>
// of a job kept by job.Retain, stays in its queue's slot and namespace
// whatever the id holds (glob characters, colons, the names of the queue's
// other keys, right-to-left overrides, 256 bytes), so the namespace's ACL
// user reads each back and no id reaches another key; an id with a brace,
// which would move the hash tag, is refused and nothing is stored.
func TestJobIDsInKeyNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	const ns, q = "tenant-k", "kept"
	rdb := aclClient(t, srv, "delayq-k", dqadmin.ACLRules(ns))
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"plain", "a*b?", "[x]", "x:y", "done:plain", "hist:1", "jobs", "..", "invoice\u202efdp.exe", strings.Repeat("z", naming.MaxIDLen)}
	typ := job.New[string]("kept.echo", job.Queue(q), job.Retain(time.Hour))
	reg := job.NewRegistry()
	typ.Handle(reg, func(ctx context.Context, j *job.Job[string]) error { return job.SetResult(ctx, []byte(j.Args)) })
	for _, id := range ids {
		if _, err := typ.Enqueue(ctx, b, id, job.ID(id)); err != nil {
			t.Fatalf("enqueue %q: %v", id, err)
		}
	}
	for _, id := range []string{"a{b}", "}x{"} {
		if _, err := typ.Enqueue(ctx, b, id, job.ID(id)); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("enqueue with id %q: %v, want job.ErrInvalid", id, err)
		}
	}
	runWorker(t, worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: q}}, MaxIdle: 100 * time.Millisecond})
	redistest.WaitFor(t, 30*time.Second, "every job succeeded and kept", func() bool {
		for _, id := range ids {
			if j, err := b.Job(ctx, q, id); err != nil || j.State != job.StateSucceeded {
				return false
			}
		}
		return true
	})
	admin := srv.Client(t)
	slot := redistest.Slot("{" + q + "}")
	for _, id := range ids {
		j, err := b.Job(ctx, q, id)
		if err != nil || string(j.Result) != id {
			t.Errorf("job %q read back by the namespace's user: %+v, %v", id, j, err)
		}
		key := ns + ":{" + q + "}:done:" + id
		if n, err := admin.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Errorf("key %q: exists %d, %v", key, n, err)
		}
		if s := redistest.Slot(key); s != slot {
			t.Errorf("key %q hashes to slot %d, its queue to %d", key, s, slot)
		}
	}
	keys, err := admin.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var done []string
	for _, k := range keys {
		if !strings.HasPrefix(k, ns+":") {
			t.Errorf("key %q outside the namespace", k)
		}
		if id, ok := strings.CutPrefix(k, ns+":{"+q+"}:done:"); ok {
			done = append(done, id)
		}
	}
	if slices.Sort(done); !slices.Equal(done, slices.Sorted(slices.Values(ids))) {
		t.Errorf("kept-job keys hold ids %q, want exactly %q", done, ids)
	}
	for _, id := range []string{"a{b}", "}x{"} {
		if _, err := b.Job(ctx, q, id); err == nil {
			t.Errorf("the refused id %q was stored", id)
		}
	}
}
