package tickid

import (
	"testing"
	"time"
)

func TestID(t *testing.T) {
	t.Parallel()
	berlin := time.FixedZone("CET", 3600)
	at := time.Date(2030, 1, 2, 4, 4, 5, 999_000_000, berlin)
	if got, want := ID("nightly-report", at), "nightly-report@2030-01-02T03:04:05Z"; got != want {
		t.Errorf("ID = %q, want %q (UTC, to the second)", got, want)
	}
}
