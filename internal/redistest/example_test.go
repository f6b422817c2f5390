package redistest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redistest"
)

func TestForExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns, done := redistest.ForExample("Example/cancel")
	if !namespaceRE.MatchString(ns) {
		t.Fatalf("namespace %q does not match %s", ns, namespaceRE)
	}
	_, other, doneOther := redistest.ForExample("Example/cancel")
	defer doneOther()
	if other == ns {
		t.Fatalf("two calls got namespace %q", ns)
	}
	if err := rdb.Set(ctx, ns+":k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	done()
	if err := rdb.Ping(ctx).Err(); err != redis.ErrClosed {
		t.Errorf("client not closed by done: ping = %v", err)
	}
	opts, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	check := redis.NewClient(opts)
	defer check.Close()
	if n, err := check.Exists(ctx, ns+":k").Result(); err != nil || n != 0 {
		t.Errorf("key under the namespace left after done: exists = %d, %v", n, err)
	}
}
