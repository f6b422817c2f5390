package sqltest_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// gauges collects the outbox metrics from reader: the last value of each
// gauge and the relayed counter by outcome.
func gauges(t *testing.T, reader *sdkmetric.ManualReader) (lag float64, pending, failed int64, relayed map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	relayed = map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				if m.Name == "delayq.outbox.lag" && len(d.DataPoints) == 1 {
					lag = d.DataPoints[0].Value
					if v, _ := d.DataPoints[0].Attributes.Value("table"); v.AsString() != "delayq_outbox" {
						t.Errorf("%s labelled table=%q", m.Name, v.AsString())
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					switch m.Name {
					case "delayq.outbox.pending":
						pending = p.Value
					case "delayq.outbox.failed":
						failed = p.Value
					}
				}
			case metricdata.Sum[int64]:
				if m.Name == "delayq.outbox.relayed" {
					for _, p := range d.DataPoints {
						v, _ := p.Attributes.Value("outcome")
						relayed[v.AsString()] += p.Value
					}
				}
			}
		}
	}
	return lag, pending, failed, relayed
}

// While Redis is down, committed rows wait in the outbox and the relay
// backs off; the lag gauges show them; once Redis is back every row is
// relayed, once.
func TestRedisDownRowsWait(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		srv := redistest.Start(t)
		b, err := broker.New(srv.Client(t), broker.Options{Namespace: "down"})
		if err != nil {
			t.Fatal(err)
		}
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		r, stop := tb.relay(t, b, outbox.RelayOptions{
			PollInterval: 10 * time.Millisecond, BatchSize: 20, BatchTimeout: time.Second,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MeterProvider: mp,
		})
		srv.Stop()
		const n = 50
		for i := range n {
			tb.inTx(t, func(tx *sql.Tx) error {
				_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(fmt.Sprintf("order-%d", i)), job.In(time.Hour))
				return err
			})
		}
		r.Notify()
		redistest.WaitFor(t, 10*time.Second, "a failed batch", func() bool { return r.Stats().Errors > 0 })
		time.Sleep(500 * time.Millisecond)
		l := tb.lag(t)
		if l.Pending != n || l.Oldest < 500*time.Millisecond {
			t.Errorf("lag with Redis down: %+v, want %d rows pending for over 500ms", l, n)
		}
		lag, pending, _, _ := gauges(t, reader)
		if pending != n || lag < 0.5 {
			t.Errorf("gauges with Redis down: lag %.3fs, pending %d; want over 0.5s and %d", lag, pending, n)
		}
		if s := r.Stats(); s.Errors == 0 || s.Enqueued != 0 {
			t.Errorf("stats with Redis down: %+v, want errors and nothing enqueued", s)
		}

		srv.Restart(t)
		tb.waitEmpty(t, 15*time.Second)
		for i := range n {
			if info, err := b.Job(tb.ctx, "orders", fmt.Sprintf("order-%d", i)); err != nil || info.State != job.StateScheduled {
				t.Errorf("order-%d after Redis came back: %+v, %v", i, info, err)
			}
		}
		lag, pending, failed, relayed := gauges(t, reader)
		if pending != 0 || failed != 0 || lag != 0 || relayed["enqueued"] != n || len(relayed) != 1 {
			t.Errorf("gauges after recovery: lag %.3f, pending %d, failed %d, relayed %v", lag, pending, failed, relayed)
		}
		stop()
		if s := r.Stats(); s.Enqueued != n || s.Duplicates != 0 {
			t.Errorf("stats %+v, want %d enqueued, no duplicates", s, n)
		}
		// The gauges are unregistered when Run returns.
		if _, pending, _, _ := gauges(t, reader); pending != 0 {
			t.Errorf("gauge still observed after Run returned")
		}
	})
}

// Several relays on one PostgreSQL table share the work without relaying
// a row twice (FOR UPDATE SKIP LOCKED); on SQLite two relays take turns
// (BEGIN IMMEDIATE) and are as safe, if no faster.
func TestSeveralRelays(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		const relays, txs, perTx = 4, 100, 10
		var rs []*outbox.Relay
		var stops []func()
		for range relays {
			r, stop := tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: 5 * time.Millisecond, BatchSize: 25})
			rs, stops = append(rs, r), append(stops, stop)
		}
		for i := range txs {
			tb.inTx(t, func(tx *sql.Tx) error {
				for j := range perTx {
					n := i*perTx + j
					if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(n)}, job.ID(fmt.Sprintf("order-%d", n)), job.In(time.Hour)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		tb.waitEmpty(t, 30*time.Second)
		var enqueued, dups, busy int64
		for _, stop := range stops {
			stop() // Run has returned: every committed batch is counted
		}
		for _, r := range rs {
			s := r.Stats()
			enqueued, dups = enqueued+s.Enqueued, dups+s.Duplicates
			if s.Enqueued > 0 {
				busy++
			}
		}
		if enqueued != txs*perTx || dups != 0 {
			t.Errorf("relays enqueued %d with %d duplicates, want %d and none", enqueued, dups, txs*perTx)
		}
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "orders"))
		if err != nil || st.Scheduled != txs*perTx {
			t.Errorf("Redis holds %+v, %v; want %d scheduled", st, err, txs*perTx)
		}
		t.Logf("%d of %d relays moved rows", busy, relays)
	})
}

// Cancels racing the relays: jobs are committed and half of them cancelled
// a moment later, some before their row was relayed, some while a relay
// holds it, some after. Every cancelled job ends up absent from Redis,
// every other one present.
func TestCancelRacesRelay(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		relays := 1
		if tb.dialect == "postgres" {
			relays = 2
			// 200 transactions at once would take 200 connections of the
			// server the package's parallel tests share.
			tb.db.SetMaxOpenConns(40)
		} else {
			// As docs/outbox.md advises: the writers take turns in
			// database/sql's queue, not in SQLite's busy handler, whose
			// timeout 200 writers at once can outlast on a busy machine.
			tb.db.SetMaxOpenConns(1)
		}
		for range relays {
			tb.relay(t, tb.b, outbox.RelayOptions{PollInterval: time.Millisecond, BatchSize: 7})
		}
		const n = 200
		var wg sync.WaitGroup
		errs := make(chan error, n)
		removedCount := atomic.Int64{}
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("order-%d", i)
				err := withTx(tb, func(tx *sql.Tx) error {
					_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(id), job.In(time.Hour))
					return err
				})
				if err != nil || i%2 == 1 {
					errs <- err
					return
				}
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				errs <- withTx(tb, func(tx *sql.Tx) error {
					removed, err := tb.ob.Cancel(tb.ctx, tx, "orders", id)
					if removed {
						removedCount.Add(1)
					}
					return err
				})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		tb.waitEmpty(t, 30*time.Second)
		for i := range n {
			id := fmt.Sprintf("order-%d", i)
			info := tb.redisJob(t, "orders", id)
			switch {
			case i%2 == 0 && info != nil:
				t.Errorf("%s was cancelled but is in Redis", id)
			case i%2 == 1 && info == nil:
				t.Errorf("%s is not in Redis", id)
			}
		}
		t.Logf("%d of %d cancels found the job still in the outbox", removedCount.Load(), n/2)
	})
}

// withTx runs fn in a transaction and commits it; for goroutines other
// than the test's.
func withTx(tb *testBundle, fn func(tx *sql.Tx) error) error {
	tx, err := tb.db.BeginTx(tb.ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
