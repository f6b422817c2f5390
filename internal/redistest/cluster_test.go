package redistest_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redistest"
)

func TestSlotMatchesServer(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	rdb := redis.NewClient(&redis.Options{Addr: c.Addrs()[0]})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, key := range []string{"", "a", "foo", "ns:{q}:jobs", "ns:{q#3}:jobs", "{}x", "x{}y", "{a}{b}", "a{b}c}", "123456789"} {
		want, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redistest.Slot(key); got != int(want) {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

func TestClusterFailoverAndRejoin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t)
	if n := len(c.Masters(t)); n != 3 {
		t.Fatalf("%d masters, want 3", n)
	}
	rdb := c.Client(t)
	for i := range 100 {
		if err := rdb.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the replica has the write, then crash its master.
	old := c.MasterOf(t, "k7")
	if err := rdb.Do(ctx, "wait", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	node := redis.NewClient(&redis.Options{Addr: old.Addr()})
	if n, err := node.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT on the master: %d, %v", n, err)
	}
	_ = node.Close()
	old.Kill()
	c.WaitHealthy(t, false)
	if now := c.MasterOf(t, "k7"); now == old {
		t.Fatal("the killed node still serves the slot")
	}
	// go-redis reloads the slot map on MOVED and every minute, not when a
	// node stops answering: ask for a reload.
	rdb.ReloadState(ctx)
	redistest.WaitFor(t, 10*time.Second, "GET through the cluster client after failover", func() bool {
		v, err := rdb.Get(ctx, "k7").Result()
		return err == nil && v == "7"
	})

	old.Restart(t)
	c.WaitHealthy(t, true)
	if slices.Contains(c.Masters(t), old) {
		t.Fatal("the restarted node came back as a master, want a replica")
	}
	if r := c.ReplicaOf(t, c.MasterOf(t, "k7")); r != old {
		t.Fatalf("the replica of k7's new master is %s, want the restarted %s", r.Addr(), old.Addr())
	}
	if got := len(redistest.Keys(t, rdb, "k*")); got != 100 {
		t.Fatalf("Keys found %d keys over the masters, want 100", got)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartSentinel(t)
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	old := s.Master(t)
	if old != s.Servers()[0] {
		t.Fatal("the initial master is not the first server")
	}
	old.Kill()
	redistest.WaitFor(t, 30*time.Second, "promotion of the replica", func() bool {
		v, err := rdb.Get(ctx, "k").Result()
		return err == nil && v == "v" && s.Master(t) != old
	})
	s.Rejoin(t, old)
	if s.Master(t) == old {
		t.Fatal("the restarted old master took over again")
	}
}

func TestServerPauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	redistest.WaitFor(t, 5*time.Second, "PING after Resume", func() bool { return rdb.Ping(ctx).Err() == nil })
}
