package broker_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
)

// TestLeaseHashesStayHashtables: from the first claim on, a queue's
// attempts and leases hashes are in Redis's hashtable encoding (O(1) per
// field, where a listpack of a few hundred leases costs O(n) per HSET and
// HDEL), and stay so once every job has ended and on the next claim. The
// field that keeps them so (keyspace.EncodingField) is seen by no reader:
// the job's details, the listing, a retry's attempt count.
func TestLeaseHashesStayHashtables(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	encodings := func() (string, string) {
		t.Helper()
		a, _ := tb.rdb.ObjectEncoding(tb.ctx, tb.key("q", "attempts")).Result()
		l, _ := tb.rdb.ObjectEncoding(tb.ctx, tb.key("q", "leases")).Result()
		return a, l
	}
	tb.enqueue(t, env("a", 0), env("b", 0))
	res := tb.claim(t, 1)
	if a, l := encodings(); a != "hashtable" || l != "hashtable" {
		t.Fatalf("after a claim of one job: attempts %s, leases %s; want hashtable", a, l)
	}
	if got := tb.jobFields(t, tb.key("q", "leases")); len(got) != 1 || got[0] != "a" {
		t.Fatalf("leases hold %v, want a", got)
	}
	// Nothing reads the field as a job.
	info, err := tb.b.Job(tb.ctx, "q", keyspace.EncodingField)
	if err == nil || info != nil {
		t.Errorf("Job(%q) = %+v, %v; want no such job", keyspace.EncodingField, info, err)
	}
	if _, err := testkit.Drive(tb.b).Retry(tb.ctx, res.Jobs[0].Lease, time.Millisecond, res.Jobs[0].Envelope); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(time.Second)
	res = tb.claim(t, 2)
	if len(res.Jobs) != 2 {
		t.Fatalf("claimed %d, want 2", len(res.Jobs))
	}
	for _, c := range res.Jobs {
		if want := map[string]int{"a": 2, "b": 1}[c.ID]; c.Attempt != want {
			t.Errorf("job %s: attempt %d, want %d", c.ID, c.Attempt, want)
		}
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease, res.Jobs[1].Lease); err != nil {
		t.Fatal(err)
	}
	tb.noJobLeft(t, "q")
	if a, l := encodings(); a != "hashtable" || l != "hashtable" {
		t.Errorf("once every job ended: attempts %s, leases %s; want hashtable", a, l)
	}
	if n, err := testkit.OneStats(tb.b.Stats(tb.ctx, "q")); err != nil || n.Processing != 0 || n.Scheduled != 0 {
		t.Errorf("stats %+v, %v; want an empty queue", n, err)
	}
}

// TestCapHashesStayHashtables: the hashes of capped jobs (running) and of
// keys' running counts (keyrun) are hashtables too from the first capped
// claim; once every job ended they hold only the encoding field, which
// neither a type's cap (it reads running whole) nor the settle counts, and
// the queue, its caps cleared, is still forgotten as idle.
func TestCapHashesStayHashtables(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.SetConcurrency(tb.ctx, "q", "t", 2); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 1); err != nil {
		t.Fatal(err)
	}
	e1, e2, e3 := env("a", 0), env("b", 0), env("c", 0)
	e1.Key, e2.Key, e3.Key = "acme", "acme", "globex"
	tb.enqueue(t, e1, e2, e3)
	// The type's room (2) bounds what a claim reads: a and b, b held by
	// its key's cap; the next claim takes c.
	first := tb.claim(t, 10)
	second := tb.claim(t, 10)
	res := protocol.ClaimResult{Jobs: append(first.Jobs, second.Jobs...)}
	if got := ids(res.Jobs); strings.Join(got, ",") != "a,c" {
		t.Fatalf("claimed %v, want a and c (b held by its key's cap)", got)
	}
	for _, name := range []string{"running", "keyrun"} {
		if enc, _ := tb.rdb.ObjectEncoding(tb.ctx, keyKey(tb, name)).Result(); enc != "hashtable" {
			t.Errorf("%s is a %s, want a hashtable", name, enc)
		}
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease, res.Jobs[1].Lease); err != nil {
		t.Fatal(err)
	}
	// b came back from its key's hold: the type has room for it, the
	// encoding field takes no slot.
	res = tb.claim(t, 10)
	if got := ids(res.Jobs); strings.Join(got, ",") != "b" {
		t.Fatalf("claimed %v after the acks, want b", got)
	}
	if err := testkit.Drive(tb.b).Ack(tb.ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	tb.noJobLeft(t, "q")
	for _, name := range []string{"running", "keyrun"} {
		if f := tb.jobFields(t, keyKey(tb, name)); len(f) != 0 {
			t.Errorf("%s holds %v once every job ended", name, f)
		}
	}
	if err := tb.b.SetConcurrency(tb.ctx, "q", "t", 0); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SetKeyConcurrency(tb.ctx, "q", "", 0); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(2 * time.Hour)
	if forgotten, err := tb.b.ForgetIdle(tb.ctx, time.Hour); err != nil || !slices.Contains(forgotten, "q") {
		t.Errorf("ForgetIdle: %v, %v; want q forgotten (its hashes hold their encoding field only)", forgotten, err)
	}
}
