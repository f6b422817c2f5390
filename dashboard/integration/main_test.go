package integration_test

import (
	"testing"

	"github.com/delayq/delayq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
