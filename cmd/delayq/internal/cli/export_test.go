package cli

import (
	"testing"

	"github.com/delayq/delayq/internal/redistest"
)

// TopologyURL is redistest.TopologyURL.
func TopologyURL(t testing.TB, userinfo string) string { return redistest.TopologyURL(t, userinfo) }
