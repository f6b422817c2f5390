package dashboard_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// deepJSON is n open brackets then n closing ones: json.Indent wrote about
// n² bytes for it.
func deepJSON(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestHostilePayloadPages renders the page of a scheduled job, of a dead
// job and of a succeeded job's result, each holding 52 arrays nested 9,998
// deep (1,039,845 bytes, under the default 1 MiB cap): with json.Indent one
// such page ended the process with "out of memory". Each page must be at
// most 4 times as long as the payload plus 64 KiB, and serving it (reading
// Redis, decoding, formatting, the template) may allocate at most 16 times
// the payload plus 4 MiB. Time follows the bytes (see
// BenchmarkFormatPayloadHostile); the pages are also served by a
// separate process under a memory limit in TestDashboardSurvivesHostilePayloads
// (internal/faulttest).
func TestHostilePayloadPages(t *testing.T) {
	// Not parallel: the allocation count is the process's.
	tb := setup(t, dashboard.Options{})
	deep := deepJSON(9998)
	payload := []byte("[" + strings.Repeat(deep+",", 51) + deep + "]")
	if len(payload) != 1_039_845 {
		t.Fatalf("payload of %d bytes", len(payload))
	}
	env := func(id string, delay time.Duration) *job.Envelope {
		return &job.Envelope{ID: id, Queue: "q", Type: "t", Payload: payload, Delay: delay}
	}
	if err := tb.b.Enqueue(tb.ctx, env("dead", 0), env("done", 0)); err != nil {
		t.Fatal(err)
	}
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", 2, time.Minute)
	if err != nil || len(res.Jobs) != 2 {
		t.Fatalf("claimed %d of 2: %v", len(res.Jobs), err)
	}
	for _, c := range res.Jobs {
		op := protocol.Op{Kind: protocol.OpAck, Lease: c.Lease, Retain: time.Hour, Done: &protocol.Done{Body: c.Body, Attempts: 1, Result: payload}}
		if c.ID == "dead" {
			op = protocol.Op{Kind: protocol.OpKill, Lease: c.Lease, Death: protocol.Death{Type: "t", Body: c.Body, Error: deep, Attempts: 1}}
		}
		if out, err := testkit.Drive(tb.b).Settle(tb.ctx, op); err != nil || out[0].Err != nil {
			t.Fatalf("settle %s: %v %+v", c.ID, err, out)
		}
	}
	if err := tb.b.Enqueue(tb.ctx, env("scheduled", time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		shown int // bytes of user data the page shows
	}{
		{"/queues/q/job?id=scheduled", len(payload)},
		{"/dead/q/job?id=dead", len(payload) + len(deep)},
		{"/queues/q/job?id=done", 2 * len(payload)}, // payload and result
		{"/dead", len(deep)},
	} {
		var r response
		start := time.Now()
		allocated := allocatedBy(func() { r = tb.get(t, c.path) })
		took := time.Since(start)
		wantStatus(t, c.path, r, http.StatusOK)
		if limit := 4*c.shown + 64<<10; len(r.body) > limit {
			t.Errorf("%s: page of %d bytes for %d shown, over %d", c.path, len(r.body), c.shown, limit)
		}
		if limit := uint64(16*c.shown + 4<<20); allocated > limit {
			t.Errorf("%s: serving it allocated %d bytes for %d shown, over %d", c.path, allocated, c.shown, limit)
		}
		if strings.Contains(r.body, "[\n  [") {
			t.Errorf("%s: the deep payload was indented", c.path)
		}
		t.Logf("%s: %d bytes shown, a page of %d bytes, %d allocated, %s", c.path, c.shown, len(r.body), allocated, took.Round(time.Millisecond))
	}
}

// allocatedBy returns the bytes the process allocated while fn ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
