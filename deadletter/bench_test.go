package deadletter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// BenchmarkListFiltered lists the dead letters of a queue holding 100,000
// records, on a redis-server of its own, with an error filter that matches
// none of them: "budget" with the default MaxScan (one call reads
// 10,000 records and returns a partial page), "unbounded" with
// MaxScan -1 (one call reads the whole store), and "unfiltered" for a page
// of 50. Loading takes a while; the loop measures only List.
func BenchmarkListFiltered(b *testing.B) {
	const records, batch = 100_000, 1_000
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	br, err := broker.New(rdb, broker.Options{DeadCap: -1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	envs := make([]*job.Envelope, batch)
	for i := 0; i < records; i += batch {
		for j := range envs {
			envs[j] = &job.Envelope{ID: fmt.Sprintf("j%06d", i+j), Queue: "q", Type: "sms.send", Payload: []byte(`{"to":"+15550100"}`), MaxRetries: 3}
		}
		if err := br.Enqueue(ctx, envs...); err != nil {
			b.Fatal(err)
		}
		res, err := testkit.Drive(br).Claim(ctx, "q", batch, time.Hour)
		if err != nil || len(res.Jobs) != batch {
			b.Fatalf("claim: %d, %v", len(res.Jobs), err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := w; k < len(res.Jobs); k += 8 {
					c := res.Jobs[k]
					rec := &job.DeadRecord{Type: "sms.send", Body: c.Body, Error: "provider: 503 service unavailable", Attempts: 4}
					if _, err := testkit.Drive(br).Kill(ctx, c.Lease, rec); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("loaded %d dead records in %v", records, time.Since(start).Round(time.Millisecond))
	in := deadletter.New(br)
	none := deadletter.Filter{ErrorContains: "no record says this"}
	for _, c := range []struct {
		name    string
		opts    deadletter.ListOptions
		scanned int
	}{
		{"budget", deadletter.ListOptions{Filter: none}, protocol.DeadScanDefault},
		{"unbounded", deadletter.ListOptions{Filter: none, MaxScan: -1}, records},
		{"unfiltered", deadletter.ListOptions{}, protocol.DeadPageDefault},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p, err := in.List(ctx, "q", c.opts)
				if err != nil {
					b.Fatal(err)
				}
				if p.Scanned != c.scanned {
					b.Fatalf("scanned %d records, want %d", p.Scanned, c.scanned)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/list")
		})
	}
}
