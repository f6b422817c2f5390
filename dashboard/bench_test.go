package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// BenchmarkOverview renders the overview of 100 queues holding 1,000,000
// scheduled jobs (10,000 each, 20 of them due; 10 more claimed this minute,
// of which 6 done, 1 dead and 3 processing) on a redis-server of its own. Loading takes a while; the loop
// measures only the handler: SMEMBERS, one pipeline of 100 stats scripts,
// one of 6,000 history reads, and the template.
func BenchmarkOverview(b *testing.B) {
	const queues, perQueue, batch = 100, 10_000, 1_000
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	br, err := broker.New(rdb, broker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	payload := []byte(`{"order_id":"ord-000123","amount_cents":4599}`)
	envs := make([]*job.Envelope, batch)
	start := time.Now()
	for q := range queues {
		name := fmt.Sprintf("queue-%03d", q)
		for i := 0; i < perQueue; i += batch {
			for j := range envs {
				n := i + j
				delay := time.Hour + time.Duration(n)*time.Second
				if n < 20 {
					delay = 0 // due now
				}
				envs[j] = &job.Envelope{ID: fmt.Sprintf("j%06d", n), Queue: name, Type: "order.cancel", Payload: payload, MaxRetries: 5, Delay: delay}
			}
			if err := br.Enqueue(ctx, envs...); err != nil {
				b.Fatal(err)
			}
		}
		// Ten more, due now and claimed: traffic, so the history has keys
		// (6 acked, 1 dead, 3 still processing).
		for j := range 10 {
			envs[j] = &job.Envelope{ID: fmt.Sprintf("k%02d", j), Queue: name, Type: "order.cancel", Payload: payload, MaxRetries: 5, At: time.UnixMilli(1)}
		}
		if err := br.Enqueue(ctx, envs[:10]...); err != nil {
			b.Fatal(err)
		}
		res, err := testkit.Drive(br).Claim(ctx, name, 10, time.Hour)
		if err != nil || len(res.Jobs) != 10 {
			b.Fatalf("claim: %d, %v", len(res.Jobs), err)
		}
		var acks []protocol.Lease
		for _, c := range res.Jobs[:6] {
			acks = append(acks, c.Lease)
		}
		if err := testkit.Drive(br).Ack(ctx, acks...); err != nil {
			b.Fatal(err)
		}
		if _, err := testkit.Drive(br).Kill(ctx, res.Jobs[6].Lease, &job.DeadRecord{Type: "order.cancel", Body: res.Jobs[6].Body, Error: "boom"}); err != nil {
			b.Fatal(err)
		}
	}
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d queues × %d jobs in %v (%d keys)", queues, perQueue, time.Since(start).Round(time.Millisecond), n)

	d, err := dashboard.New(br, dashboard.Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	check := httptest.NewRecorder()
	d.ServeHTTP(check, req)
	if check.Code != http.StatusOK {
		b.Fatalf("overview: %d\n%s", check.Code, check.Body)
	}
	for _, want := range []string{`id="total-scheduled">1,000,000<`, `id="total-processing">300<`, `id="total-dead">100<`, `id="total-due">2,000<`, `<tr id="queue-queue-099">`} {
		if !strings.Contains(check.Body.String(), want) {
			b.Fatalf("overview lacks %q", want)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		d.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("overview: %d", w.Code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/render")
}
