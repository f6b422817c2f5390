package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// MainCleanup is [Main] for packages whose TestMain sets something up for
// all tests, such as a binary built for them: cleanup runs once the tests
// have run, before the shared server is stopped and goroutines are checked.
//
//	func TestMain(m *testing.M) {
//		dir := buildBinary()
//		redistest.MainCleanup(m, func() { os.RemoveAll(dir) })
//	}
func MainCleanup(m *testing.M, cleanup func()) {
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	stopShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: goroutines leaked after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
