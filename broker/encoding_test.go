package broker_test

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
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
	if n, err := tb.b.Stats(tb.ctx, "q"); err != nil || n.Processing != 0 || n.Scheduled != 0 {
		t.Errorf("stats %+v, %v; want an empty queue", n, err)
	}
}
