package delayqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/worker"
)

// Redis returns a Redis client for the test and a key namespace of its
// own, with everything cleaned up by t.Cleanup:
//
//   - with REDIS_URL set, that server, and the namespace's keys are
//     deleted at cleanup (other keys are not touched);
//   - else, with redis-server on PATH (or the binary DELAYQ_REDIS_SERVER
//     names, e.g. /usr/bin/valkey-server), a server of the test's own on
//     a free 127.0.0.1 port, persistence off, killed at cleanup;
//   - else an embedded in-process server (miniredis), closed at cleanup.
//     It runs delayq's scripts, but is not Redis: run the suite against a
//     real server too (CI).
//
// The test log says which one it got.
func Redis(t testing.TB) (rdb redis.UniversalClient, ns string) {
	t.Helper()
	if os.Getenv("REDIS_URL") != "" {
		rdb, ns = redistest.New(t)
		t.Logf("delayqtest: Redis at REDIS_URL, namespace %s", ns)
		return rdb, ns
	}
	ns = "dqt-" + randomID()
	if _, err := redistest.ServerBinary(); err == nil {
		srv := redistest.Start(t)
		t.Logf("delayqtest: redis-server of the test's own at %s", srv.Addr())
		return srv.Client(t), ns
	}
	m, err := miniredis.Run()
	if err != nil {
		t.Fatalf("delayqtest: start embedded Redis: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close(); m.Close() })
	t.Logf("delayqtest: REDIS_URL unset and no redis-server on PATH: embedded Redis (miniredis) at %s", m.Addr())
	return c, ns
}

// NewBroker returns a broker for the test on [Redis]: opts as given, with
// the test's namespace when opts.Namespace is empty. It fails the test on
// bad options.
func NewBroker(t testing.TB, opts broker.Options) *broker.Broker {
	t.Helper()
	rdb, ns := Redis(t)
	if opts.Namespace == "" {
		opts.Namespace = ns
	}
	b, err := broker.New(rdb, opts)
	if err != nil {
		t.Fatalf("delayqtest: broker: %v", err)
	}
	return b
}

// StartWorker starts a worker of cfg that runs until the test ends, or
// until stop is called; stop waits for the worker's Run to return, and
// an error from Run fails the test. Bad config fails the test at once.
func StartWorker(t testing.TB, cfg worker.Options) (stop func()) {
	t.Helper()
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatalf("delayqtest: worker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("delayqtest: worker Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// WaitFor polls cond until it holds, failing the test with what after
// timeout. Give generous timeouts: a busy machine is slow.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	redistest.WaitFor(t, timeout, what, cond)
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
