package worker_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// syncBuffer is a bytes.Buffer safe for the worker's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestEvictionPolicyCheckAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		want    string // a log line that must appear
		warning bool
	}{
		{"allkeys-lru warns", []string{"--maxmemory-policy", "allkeys-lru"}, "drop jobs", true},
		{"noeviction is quiet", []string{"--maxmemory-policy", "noeviction"}, "eviction policy keeps jobs", false},
		{"config disabled is tolerated", []string{"--rename-command", "CONFIG", ""}, "cannot read the Redis maxmemory-policy", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, tc.args...)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			b, err := broker.New(rdb, broker.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			logger := zerolog.New(&logs).Level(zerolog.DebugLevel)
			stop := start(t, worker.Options{Broker: b, Registry: job.NewRegistry(), Logger: &logger, MaxIdle: 100 * time.Millisecond})
			redistest.WaitFor(t, 10*time.Second, "log line "+tc.want, func() bool {
				return strings.Contains(logs.String(), tc.want)
			})
			stop()
			warned := strings.Contains(logs.String(), `"level":"warn"`)
			if warned != tc.warning {
				t.Fatalf("warning logged: %v, want %v; logs:\n%s", warned, tc.warning, logs.String())
			}
		})
	}
}
