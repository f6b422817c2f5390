package deadletter_test

import (
	"context"
	"errors"
	"fmt"
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
				res, err = in.DeleteAll(ctx, "q", deadletter.Filter{}, opts)
			}
			select {
			case <-lost:
			default:
				t.Fatal("no reply was lost")
			}
			if err != nil || res.Done != 30 || res.Failed != 0 {
				t.Fatalf("%s with a lost reply: %+v, %v; want 30 done", op, res, err)
			}
			st, err := oneStats(direct.Stats(ctx, "q"))
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
