package faulttest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redistest"
)

// quiet drops go-redis's own log lines (failed dials while a fault lasts):
// the suites count faults themselves.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	redistest.Main(m)
}
