package sqltest_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// BenchmarkRelay measures how fast one relay empties an outbox of b.N
// committed jobs into Redis (batches of 500), in jobs per second. The rows
// are written before the timer starts. Run with a fixed count, e.g.
//
//	go test -run '^$' -bench 'BenchmarkRelay$' -benchtime 20000x -count 5 ./outbox
func BenchmarkRelay(b *testing.B) {
	for _, d := range dialects {
		b.Run(d, func(b *testing.B) {
			tb := setup(b, d)
			fill(b, tb, b.N)
			r, err := outbox.NewRelay(tb.ob, tb.b, outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() { done <- r.Run(ctx) }()
			for {
				l, err := tb.ob.Lag(tb.ctx)
				if err != nil {
					b.Fatal(err)
				}
				if l.Pending == 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			if s := r.Stats(); s.Enqueued != int64(b.N) {
				b.Fatalf("relayed %+v, want %d enqueued", s, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// fill commits n jobs, 100 per transaction.
func fill(b *testing.B, tb *testBundle, n int) {
	b.Helper()
	for i := 0; i < n; i += 100 {
		tb.inTx(b, func(tx *sql.Tx) error {
			for j := i; j < min(i+100, n); j++ {
				if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(j)}, job.ID(fmt.Sprintf("order-%d", j)), job.In(time.Hour)); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// BenchmarkRelayLag measures the outbox's lag (the age of the oldest
// unrelayed row, sampled every 10ms) under a steady load of 500 jobs/s,
// one job per transaction, b.N jobs in all: "notify" has the producer call
// Relay.Notify after each commit (relay in the same process), "poll" leaves
// the relay to its PollInterval of 100ms (relay in another process).
// "sqlite" uses one connection (db.SetMaxOpenConns(1)), so that the
// producer and the relay take turns in database/sql's queue;
// "sqlite-pool" leaves the pool unbounded, so that they wait for SQLite's
// write lock in its busy handler, which polls. Reports the median, 99th
// percentile and maximum in milliseconds.
//
//	go test -run '^$' -bench 'BenchmarkRelayLag' -benchtime 3000x -count 5 ./outbox
func BenchmarkRelayLag(b *testing.B) {
	const rate = 500 // jobs per second
	for _, d := range []string{"postgres", "sqlite", "sqlite-pool"} {
		for _, mode := range []string{"notify", "poll"} {
			b.Run(d+"/"+mode, func(b *testing.B) {
				tb := setup(b, strings.TrimSuffix(d, "-pool"))
				if d == "sqlite" {
					tb.db.SetMaxOpenConns(1) // as docs/outbox.md advises
				}
				r, err := outbox.NewRelay(tb.ob, tb.b, outbox.RelayOptions{PollInterval: 100 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- r.Run(ctx) }()

				var samples []time.Duration
				sampled := make(chan struct{})
				stopSampling := make(chan struct{})
				go func() {
					defer close(sampled)
					tick := time.NewTicker(10 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stopSampling:
							return
						case <-tick.C:
							if l, err := tb.ob.Lag(tb.ctx); err == nil {
								samples = append(samples, l.Oldest)
							}
						}
					}
				}()
				b.ResetTimer()
				tick := time.NewTicker(time.Second / rate)
				for i := range b.N {
					<-tick.C
					tb.inTx(b, func(tx *sql.Tx) error {
						_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(fmt.Sprintf("order-%d", i)), job.In(time.Hour))
						return err
					})
					if mode == "notify" {
						r.Notify()
					}
				}
				tick.Stop()
				for {
					l, err := tb.ob.Lag(tb.ctx)
					if err != nil {
						b.Fatal(err)
					}
					if l.Pending == 0 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				b.StopTimer()
				close(stopSampling)
				<-sampled
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				if s := r.Stats(); s.Enqueued != int64(b.N) {
					b.Fatalf("relayed %+v, want %d enqueued", s, b.N)
				}
				slices.Sort(samples)
				at := func(q float64) float64 {
					if len(samples) == 0 {
						return 0
					}
					return float64(samples[min(len(samples)-1, int(q*float64(len(samples))))]) / float64(time.Millisecond)
				}
				b.ReportMetric(at(0.5), "lag-p50-ms")
				b.ReportMetric(at(0.99), "lag-p99-ms")
				b.ReportMetric(at(1), "lag-max-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
