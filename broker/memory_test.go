package broker_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestQueueAndServerMemory: QueueMemory estimates a queue's keys in
// proportion to what they hold, counting the held set of a capped type;
// ServerMemory reads the server's used memory; with Options.Functions,
// ServerMemory does not ask (its user is given no INFO) and says so.
func TestQueueAndServerMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	b, err := broker.New(rdb, broker.Options{Namespace: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"body":"` + strings.Repeat("x", 1000) + `"}`)
	var envs []*job.Envelope
	for i := range 1000 {
		envs = append(envs, &job.Envelope{ID: "big-" + strconv.Itoa(i), Queue: "big", Type: "t", Payload: payload, Delay: 3600e9})
	}
	if err := b.Enqueue(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(ctx, &job.Envelope{ID: "s", Queue: "small", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetConcurrency(ctx, "big", "t", 1); err != nil {
		t.Fatal(err)
	}
	stBig, err := testkit.OneStats(b.Stats(ctx, "big"))
	if err != nil {
		t.Fatal(err)
	}
	stSmall, _ := testkit.OneStats(b.Stats(ctx, "small"))
	big, err := b.QueueMemory(ctx, stBig)
	if err != nil {
		t.Fatal(err)
	}
	small, err := b.QueueMemory(ctx, stSmall)
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 payloads of 1 kB: about 1 MB, estimated from samples.
	if big.Bytes < 800e3 || big.Bytes > 4e6 || small.Bytes > 20e3 || big.Keys < 2 || small.Keys < 2 {
		t.Fatalf("QueueMemory: big %+v, small %+v; want about 1 MB and a few kB", big, small)
	}
	sm, err := b.ServerMemory(ctx)
	if err != nil || sm.Used < big.Bytes || sm.Nodes != 1 {
		t.Fatalf("ServerMemory = %+v, %v; want at least the queue's bytes, one server", sm, err)
	}

	fb, err := broker.New(rdb, broker.Options{Namespace: "mem", Functions: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fb.ServerMemory(ctx); !errors.Is(err, broker.ErrMemoryNotReadable) || !strings.Contains(err.Error(), "Options.Functions") {
		t.Errorf("ServerMemory with Functions: %v; want ErrMemoryNotReadable naming Options.Functions", err)
	}
	if _, err := b.QueueMemory(ctx, job.QueueStats{Queue: "bad queue"}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("QueueMemory of a bad queue name: %v, want job.ErrInvalid", err)
	}
}
