package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/faultproxy"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// lossyInspector is an Inspector whose client talks to a server of its own
// through a fault proxy, without go-redis's own retries, and a broker
// straight on the server that kills the jobs.
func lossyInspector(t *testing.T) (*deadletter.Inspector, *broker.Broker, *faultproxy.Proxy) {
	t.Helper()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b := testkit.NewBroker(t, c, broker.Options{})
	return deadletter.New(b), testkit.NewBroker(t, srv.Client(t), broker.Options{}), p
}

func killAll(t *testing.T, b *broker.Broker, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if err := b.Enqueue(ctx, &job.Envelope{ID: id, Queue: "q", Type: "t", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range testkit.Claim(t, b, "q", len(ids), time.Minute) {
		testkit.Kill(t, b, c, "boom")
	}
}

// A bulk redrive or delete whose batch call loses its reply sends it again
// (its call id makes the resend answer what the first send did): the
// counts are true, and no job is redriven or deleted twice.
func TestBulkResendsALostBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, op := range []string{"redrive", "delete"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			in, direct, p := lossyInspector(t)
			ids := make([]string, 30)
			for i := range ids {
				ids[i] = fmt.Sprintf("j%02d", i)
			}
			killAll(t, direct, ids...)
			// The second batch's reply is lost (the first names the
			// scripts to the server).
			first := true
			var lost <-chan []string
			opts := deadletter.BulkOptions{Batch: 10, Progress: func(deadletter.BulkResult) {
				if first {
					lost, first = p.DropReply(faultproxy.Command("evalsha", testkit.Key(t, direct, "q", "dead"))), false
				}
			}}
			var res deadletter.BulkResult
			var err error
			if op == "redrive" {
				res, err = in.RedriveAll(ctx, "q", deadletter.Filter{}, opts)
			} else {
				// A filter, for a delete record by record (an empty
				// one empties the store whole, without batches).
				res, err = in.DeleteAll(ctx, "q", deadletter.Filter{Type: "t"}, opts)
			}
			select {
			case <-lost:
			default:
				t.Fatal("no reply was lost")
			}
			if err != nil || res.Done != 30 || res.Failed != 0 {
				t.Fatalf("%s with a lost reply: %+v, %v; want 30 done", op, res, err)
			}
			st, err := testkit.OneStats(direct.Stats(ctx, "q"))
			if err != nil {
				t.Fatal(err)
			}
			want := int64(30)
			if op == "delete" {
				want = 0
			}
			if st.Dead != 0 || st.Scheduled != want {
				t.Fatalf("after %s: %+v", op, st)
			}
		})
	}
}

// A single Redrive or Delete whose reply was lost fails with a
// *broker.CallError; broker.Resend answers nil, what the first send did,
// not ErrNotFound.
func TestInspectorResend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, direct, p := lossyInspector(t)
	killAll(t, direct, "a", "b", "warm")
	if err := in.Delete(ctx, "q", "warm"); err != nil { // the server learns the scripts
		t.Fatal(err)
	}
	if err := in.Redrive(ctx, "q", time.Hour, "none"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"redrive", func() error { return in.Redrive(ctx, "q", time.Hour, "a") }},
		{"delete", func() error { return in.Delete(ctx, "q", "b") }},
	} {
		lost := p.DropReply(faultproxy.Command("evalsha", testkit.Key(t, direct, "q", "dead")))
		err := c.do()
		<-lost
		var ce *broker.CallError
		if !errors.As(err, &ce) || !errors.Is(err, broker.ErrOutcomeUnknown) {
			t.Fatalf("%s with a lost reply: %v, want a CallError", c.name, err)
		}
		if err := broker.Resend(ctx, err); err != nil {
			t.Fatalf("%s resent: %v, want nil", c.name, err)
		}
	}
}

// DeleteAll with an empty filter empties a queue's store whole: one
// transaction that counts the records and unlinks the store's keys, no
// script call per batch of records, whatever their number.
func TestDeleteAllWithoutFilterEmptiesTheStoreWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := testkit.NewBroker(t, rdb, broker.Options{})
	ids := make([]string, 250)
	for i := range ids {
		ids[i] = fmt.Sprintf("j%03d", i)
	}
	killAll(t, b, ids...)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var progress []deadletter.BulkResult
	res, err := deadletter.New(b).DeleteAll(ctx, "q", deadletter.Filter{}, deadletter.BulkOptions{
		Batch: 10, Progress: func(r deadletter.BulkResult) { progress = append(progress, r) }})
	if err != nil || res.Done != 250 || res.Failed != 0 || res.Err != nil {
		t.Fatalf("DeleteAll(empty filter) = %+v, %v; want 250 done", res, err)
	}
	if len(progress) != 1 || progress[0].Done != 250 {
		t.Errorf("progress %+v, want one call after the queue, 250 done", progress)
	}
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_hdel:", "cmdstat_zrem:"} {
		if strings.Contains(stats, cmd) {
			t.Errorf("a record-by-record delete ran (%s):\n%s", cmd, stats)
		}
	}
	if !strings.Contains(stats, "cmdstat_unlink:calls=1,") || !strings.Contains(stats, "cmdstat_multi:calls=1,") {
		t.Errorf("want one transaction with one UNLINK:\n%s", stats)
	}
	st, err := testkit.OneStats(b.Stats(ctx, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 {
		t.Errorf("after DeleteAll: %+v", st)
	}
	if _, err := deadletter.New(b).DeleteAll(ctx, "q", deadletter.Filter{}, deadletter.BulkOptions{Batch: -1}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("DeleteAll(empty filter, batch -1): %v, want job.ErrInvalid", err)
	}
}
