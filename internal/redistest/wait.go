package redistest

import (
	"testing"
	"time"
)

// WaitFor calls cond every 5ms until it returns true, and fails the test
// with msg if timeout passes first. cond is called once immediately. Like
// t.Fatal, it must be called from the test's goroutine.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: timed out after %v: %s", timeout, msg)
			return
		}
		<-ticker.C
	}
}
