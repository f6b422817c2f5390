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
	ns = "dqt-" + randomID()
	if u := os.Getenv("REDIS_URL"); u != "" {
		// A client of the test's own, from REDIS_URL as it is now: a
		// test that sets it gets that server, whatever an earlier test of
		// the process used.
		opts, err := redis.ParseURL(u)
		if err != nil {
			t.Fatalf("delayqtest: REDIS_URL: %v", err)
		}
		c := redis.NewClient(opts)
		t.Cleanup(func() {
			if err := deleteNamespace(c, ns); err != nil {
				t.Errorf("delayqtest: delete the keys of namespace %s at REDIS_URL: %v", ns, err)
			}
			_ = c.Close()
		})
		t.Logf("delayqtest: Redis at REDIS_URL, namespace %s", ns)
		return c, ns
	}
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

// deleteNamespace deletes every key of namespace ns (its keys are under
// ns+":"), SCANning a page at a time.
func deleteNamespace(c *redis.Client, ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, ns+":*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) > 0 {
		return c.Unlink(ctx, keys...).Err()
	}
	return nil
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
