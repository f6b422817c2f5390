package worker_test

import (
	"testing"

	"github.com/delayq/delayq/internal/pgtest"
	"github.com/delayq/delayq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.MainCleanup(m, pgtest.StopShared) }
