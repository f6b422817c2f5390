package broker_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestForgetIdleQueues: ForgetIdle unlists the queues nobody listed for
// the idle time that hold nothing and have no control set; a queue with
// jobs, a pause, a paused key, or a recent use stays. A single shard's count goes with
// it, a sharded queue's stays (and Forget still removes it). A producer
// that held a forgotten queue lists it again with its next enqueue.
func TestForgetIdleQueues(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, q := range []string{"idle", "fresh", "busy", "paused", "keypaused"} {
		if err := tb.b.DeclareQueue(tb.ctx, q, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.b.DeclareQueue(tb.ctx, "sharded", 3); err != nil {
		t.Fatal(err)
	}
	tb.enqueue(t, &job.Envelope{ID: "j", Queue: "busy", Type: "t", Delay: 48 * time.Hour})
	if err := tb.b.Pause(tb.ctx, "paused", ""); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.PauseKey(tb.ctx, "keypaused", "acme"); err != nil {
		t.Fatal(err)
	}
	tb.clock.Advance(2 * time.Hour)
	// Another process lists "fresh" now: it is in use.
	other, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(other, tb.clock.Now)
	if err := other.DeclareQueue(tb.ctx, "fresh", 1); err != nil {
		t.Fatal(err)
	}

	if _, err := tb.b.ForgetIdle(tb.ctx, time.Minute); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "idle time 1m0s") {
		t.Fatalf("ForgetIdle(1m): %v, want an error wrapping job.ErrInvalid naming the idle time", err)
	}
	forgotten, err := tb.b.ForgetIdle(tb.ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(forgotten, []string{"idle", "sharded"}) {
		t.Fatalf("forgotten %v, want [idle sharded]", forgotten)
	}
	listed, err := protocol.Admin(tb.b).Queues(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, []string{"busy", "fresh", "keypaused", "paused"}) {
		t.Fatalf("queues listed %v, want [busy fresh keypaused paused]", listed)
	}
	counts := tb.rdb.HGetAll(tb.ctx, keyspace.ShardsKey(tb.ns)).Val()
	if _, ok := counts["idle"]; ok || counts["sharded"] != "3" {
		t.Fatalf("shard counts %v: want idle's gone and sharded's 3 kept", counts)
	}
	if err := tb.b.MustKnow(tb.ctx, "idle"); !errors.Is(err, broker.ErrUnknownQueue) {
		t.Fatalf("a forgotten queue: %v, want ErrUnknownQueue (an operator's action on it is refused)", err)
	}
	if again, err := tb.b.ForgetIdle(tb.ctx, time.Hour); err != nil || len(again) != 0 {
		t.Fatalf("a second pass: %v, %v; want nothing more", again, err)
	}

	// The producer still holds "idle": its next enqueue lists it again,
	// with a count, and its job is seen.
	tb.enqueue(t, &job.Envelope{ID: "late", Queue: "idle", Type: "t"})
	if ok, err := tb.b.Known(tb.ctx, "idle"); err != nil || !ok {
		t.Fatalf("after an enqueue: known %v, %v; want listed again", ok, err)
	}
	if n := tb.rdb.HGet(tb.ctx, keyspace.ShardsKey(tb.ns), "idle").Val(); n != "1" {
		t.Fatalf("shard count of idle after the enqueue: %q, want 1", n)
	}
	st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "idle"))
	if err != nil || st.Scheduled != 1 {
		t.Fatalf("stats of idle: %+v, %v; want its job", st, err)
	}

	// A sharded queue unlisted for being idle can still be forgotten for
	// good.
	if err := tb.b.Forget(tb.ctx, "sharded"); err != nil {
		t.Fatal(err)
	}
	if tb.rdb.HExists(tb.ctx, keyspace.ShardsKey(tb.ns), "sharded").Val() {
		t.Fatal("Forget left the sharded queue's count")
	}
}

// A queue listed before its use was recorded (ns:queues:seen) starts its
// idle time at the first ForgetIdle; a name delayq could not have written
// is left alone, with no error.
func TestForgetIdleStartsWithoutARecord(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.rdb.SAdd(tb.ctx, keyspace.QueuesKey(tb.ns), "old", "not a queue {name}").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := tb.b.ForgetIdle(tb.ctx, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("first pass: %v, %v; want nothing forgotten", got, err)
	}
	tb.clock.Advance(time.Hour)
	if got, err := tb.b.ForgetIdle(tb.ctx, time.Hour); err != nil || !slices.Equal(got, []string{"old"}) {
		t.Fatalf("an hour later: %v, %v; want [old]", got, err)
	}
}
