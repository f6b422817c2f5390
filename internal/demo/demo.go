// Package demo connects the examples to Redis: the server named by REDIS_URL
// when it is set, otherwise an embedded in-process server, so that every
// example runs with one command on a machine without Redis.
package demo

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis returns a client, a description of where it points, and a function
// that closes the client (and stops the embedded server, if one was started).
func Redis(ctx context.Context) (redis.UniversalClient, string, func(), error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb := redis.NewClient(opts)
		if err := rdb.Ping(ctx).Err(); err != nil {
			rdb.Close()
			return nil, "", nil, fmt.Errorf("REDIS_URL %s: %w", opts.Addr, err)
		}
		return rdb, "redis at " + opts.Addr, func() { rdb.Close() }, nil
	}
	srv, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	return rdb, "embedded redis (REDIS_URL unset)", func() { rdb.Close(); srv.Close() }, nil
}

// Clock prints lines stamped with the time since it was made.
type Clock struct{ start time.Time }

// NewClock starts a clock.
func NewClock() *Clock { return &Clock{start: time.Now()} }

// Printf prints one stamped line.
func (c *Clock) Printf(format string, args ...any) {
	fmt.Printf("[%6.3fs] %s\n", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}
