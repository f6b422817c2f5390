package shardtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/delayq/delayq/internal/redistest"
)

// bin is the delayq binary, built once for this test binary.
var bin string

func TestMain(m *testing.M) {
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
