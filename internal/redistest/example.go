package redistest

import (
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ForExample is [New] for Example functions, which have no testing.TB: it
// returns a client of the package's shared server (chosen as the package
// doc says), a fresh namespace as New makes one for a test called name, and
// done, which closes the client and deletes the keys under the namespace.
// It panics when no server can be had. The package's TestMain must call
// [Main], as for New.
func ForExample(name string) (rdb redis.UniversalClient, ns string, done func()) {
	s := getShared(exampleTB{})
	ns = namespace(name)
	c := s.client() // of the topology under test
	return c, ns, func() {
		_ = c.Close()
		if err := deleteNamespace(s, ns); err != nil {
			panic(fmt.Sprintf("redistest: delete keys of namespace %q: %v", ns, err))
		}
	}
}

// exampleTB is the testing.TB that ForExample hands to getShared, which
// uses only Helper, Fatalf and Logf. Any other method would panic on the
// nil embedded TB; TestForExample runs ForExample to catch that.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper() {}

func (exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Logf writes to stderr: an Example's stdout is its checked output.
func (exampleTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
