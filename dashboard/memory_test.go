package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	dqadmin "github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

var memoryCard = regexp.MustCompile(`id="q-memory">([0-9.]+) (B|KiB|MiB)</span>`)

// queueMemoryOf reads the queue page's memory card, in bytes (to its one
// decimal).
func queueMemoryOf(t *testing.T, tb *testBundle, q string) float64 {
	t.Helper()
	r := tb.get(t, "/queues/"+q)
	wantStatus(t, "queue page "+q, r, http.StatusOK)
	m := memoryCard.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("queue page of %s has no memory card in bytes", q)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return n * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[m[2]]
}

// TestRedisMemory: a queue's page shows what its keys take in Redis, in
// proportion to what it holds, and the overview the server's memory in
// all.
func TestRedisMemory(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	payload := `{"body":"` + strings.Repeat("x", 1000) + `"}`
	var envs []*job.Envelope
	for i := range 2000 {
		envs = append(envs, &job.Envelope{ID: "big-" + strconv.Itoa(i), Queue: "big", Type: "t", Payload: []byte(payload), Delay: 3600e9})
	}
	if err := tb.b.Enqueue(tb.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	tb.enqueue(t, "small", "s1", "t", `{}`, 0)
	big, small := queueMemoryOf(t, tb, "big"), queueMemoryOf(t, tb, "small")
	// 2,000 payloads of 1 kB: about 2 MB, estimated from samples.
	if big < 1.5e6 || big > 8e6 || small > 20e3 {
		t.Fatalf("memory of big %.0f B, of small %.0f B; want about 2 MB and a few kB", big, small)
	}
	r := tb.get(t, "/queues/big")
	mustContain(t, "queue page", r.body, `(sampled), of `, " in all</span>")
	r = tb.get(t, "/")
	mustContain(t, "overview", r.body, `id="server-memory">`, "Redis memory in all")
	mustNotContain(t, "overview", r.body, "not available")
}

// TestRedisMemoryRefused: as a Redis user of admin.ACLRules, which may run
// MEMORY USAGE on its keys but not INFO, a queue page shows the queue's
// memory and the overview answers 200 saying the server's memory is not
// available; the broker asks for INFO once, not at every refresh.
func TestRedisMemoryRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const ns = "memacl"
	args := []any{"ACL", "SETUSER", "dash-" + ns, "reset", "on", ">s3cret-s3cret"}
	for _, r := range strings.Fields(dqadmin.ACLRules(ns)) {
		args = append(args, r)
	}
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "dash-" + ns, Password: "s3cret-s3cret"})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(t.Context(), &job.Envelope{ID: "a", Queue: "q", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	t.Cleanup(web.Close)
	if err := admin.Do(t.Context(), "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want, not string }{
		{"/", `id="server-memory-note">Redis memory not available: this Redis user may not run it (INFO memory refused: NOPERM`, ""},
		{"/", `id="server-memory-note">Redis memory not available: this Redis user may not run it (INFO memory refused: NOPERM`, ""},
		{"/queues/q", `id="q-memory-note">Redis memory of its `, "not available"},
	} {
		res, err := testClient(t).Get(web.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, res)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s as the ACL user: %d\n%s", c.path, res.StatusCode, body)
		}
		mustContain(t, c.path, body, c.want)
		if c.not != "" {
			mustNotContain(t, c.path, body, c.not)
		}
	}
	// One refusal in the ACL log, of INFO, counted once: the second
	// overview and the queue page did not ask again.
	entries, err := admin.Do(t.Context(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("ACL LOG has %d entries, want 1 (INFO, once): %v", len(entries), entries)
	}
	if m, ok := entries[0].(map[any]any); !ok || m["object"] != "info" || m["count"] != int64(1) {
		t.Errorf("ACL LOG entry %v, want INFO refused once", entries[0])
	}
}
