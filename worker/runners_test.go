package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// goroutineID returns the id of the calling goroutine, from its stack
// trace's header ("goroutine 123 [running]:").
func goroutineID(t *testing.T) uint64 {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	id, err := strconv.ParseUint(string(s[:bytes.IndexByte(s, ' ')]), 10, 64)
	if err != nil {
		t.Errorf("goroutine id of %q: %v", b[:], err)
	}
	return id
}

// liveGoroutines returns the ids of the goroutines alive now.
func liveGoroutines() map[uint64]bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	live := map[uint64]bool{}
	for line := range bytes.Lines(buf) {
		rest, ok := bytes.CutPrefix(line, []byte("goroutine "))
		if !ok {
			continue
		}
		if i := bytes.IndexByte(rest, ' '); i > 0 {
			if id, err := strconv.ParseUint(string(rest[:i]), 10, 64); err == nil {
				live[id] = true
			}
		}
	}
	return live
}

// Handlers run on at most Concurrency long-lived runners: waves of jobs,
// each enqueued once the last has run (so no job waits in line between
// waves), run on the same goroutines, not on one new goroutine per job;
// once Run has returned, none of them is left (each exits right after it
// is counted done).
func TestHandlersRunOnParkedRunners(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("runners")
	var mu sync.Mutex
	ran := map[uint64]int{} // jobs run, by goroutine
	handled := 0
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		id := goroutineID(t)
		mu.Lock()
		ran[id]++
		handled++
		mu.Unlock()
		return nil
	})
	const concurrency, waves = 3, 8
	cfg := tb.config(t)
	cfg.Concurrency = concurrency
	stop := start(t, cfg)
	for wave := range waves {
		enqueueN(t, tb, typ, fmt.Sprintf("wave%d-", wave), concurrency)
		want := concurrency * (wave + 1)
		redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("%d jobs handled", want), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return handled == want
		})
	}
	mu.Lock()
	runners := len(ran)
	mu.Unlock()
	if runners > concurrency {
		t.Fatalf("%d jobs ran on %d goroutines, want at most Concurrency (%d): %v", waves*concurrency, runners, concurrency, ran)
	}
	stop()
	// Run waits for its runners (a WaitGroup), whose Done comes just
	// before each goroutine's own exit, so one may still be listed for an
	// instant after Run returned; a runner left parked would be listed for
	// good.
	deadline := time.Now().Add(5 * time.Second)
	for {
		live := liveGoroutines()
		var left []uint64
		for id := range ran {
			if live[id] {
				left = append(left, id)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner goroutines %v still alive 5s after Run returned", left)
		}
		time.Sleep(time.Millisecond)
	}
	redistest.WaitFor(t, 5*time.Second, "the last acks recorded", func() bool {
		n, _ := tb.rdb.Exists(tb.ctx, tb.key("default", "processing")).Result()
		return n == 0
	})
	tb.queueKeysEmpty(t, naming.DefaultQueue)
}
