package broker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestImportCostsLittleAtStart: a program that imports package broker
// (and through it job, retry and the internal packages) allocates at most
// 1 MB at program start for delayq's packages: the scripts are put
// together by the first New, not in init (GODEBUG=inittrace=1). Time is
// left to docs/benchmarks.md; bytes do not depend on the machine's load.
func TestImportCostsLittleAtStart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a program")
	}
	bin := filepath.Join(t.TempDir(), "importonly")
	build := exec.Command("go", "build", "-o", bin, "./testdata/importonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := exec.Command(bin)
	run.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`(?m)^init (github\.com/delayq/delayq/\S+) @\S+ ms, (\S+) ms clock, (\d+) bytes, (\d+) allocs$`)
	var bytes, allocs int64
	var pkgs []string
	for _, m := range line.FindAllStringSubmatch(string(out), -1) {
		b, _ := strconv.ParseInt(m[3], 10, 64)
		a, _ := strconv.ParseInt(m[4], 10, 64)
		bytes, allocs = bytes+b, allocs+a
		pkgs = append(pkgs, m[1]+" "+m[2]+" ms")
	}
	if len(pkgs) == 0 {
		t.Fatalf("no init line of a delayq package in:\n%s", out)
	}
	t.Logf("delayq packages at start: %d bytes, %d allocs (%v)", bytes, allocs, pkgs)
	if bytes > 1<<20 {
		t.Errorf("importing broker allocates %d bytes at program start, more than 1 MB", bytes)
	}
}
