package shardtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/delayq/delayq/internal/redistest"
)

// bin is the delayq binary, built once for this test binary; "" on a
// cluster, where the command cannot connect.
var bin string

func TestMain(m *testing.M) {
	if cliSkipped() != "" {
		redistest.Main(m)
		return
	}
	dir, err := os.MkdirTemp("", "delayq-shardtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "delayq")
	build := exec.Command("go", "build", "-o", bin, "github.com/delayq/delayq/cmd/delayq")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build delayq: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	redistest.MainCleanup(m, func() { _ = os.RemoveAll(dir) })
}

// cliSkipped says why the delayq command cannot run against the shared
// server, or "" when it can: it takes one redis:// URL and makes a
// single-node client, which a cluster answers with MOVED for most keys.
func cliSkipped() string {
	if redistest.Topology() == "cluster" {
		return "the delayq command connects to a single node (--redis-url), not to a cluster"
	}
	return ""
}
