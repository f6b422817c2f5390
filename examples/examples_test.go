// Package examples_test runs every example as a user would, with no Redis
// (REDIS_URL unset, so each starts its embedded server), and checks what it
// prints.
package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "delayq-examples")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runExample builds ./NAME and runs it with REDIS_URL unset, failing the
// test unless it exits 0 within limit. It returns the combined output.
func runExample(t *testing.T, name string, limit time.Duration) string {
	t.Helper()
	bin := filepath.Join(binDir, name)
	if out, err := exec.Command("go", "build", "-o", bin, "./"+name).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = withoutEnv(os.Environ(), "REDIS_URL")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not exit within %v:\n%s", name, limit, out)
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	t.Logf("%s exited 0 after %v", name, time.Since(start).Round(time.Millisecond))
	return string(out)
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func expectLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestQuickstart(t *testing.T) {
	t.Parallel()
	out := runExample(t, "quickstart", 15*time.Second)
	expectLines(t, out,
		"using embedded redis",
		"report.build   attempt 1 failed, retrying with backoff",
		"report.build   attempt 3 succeeded",
		"dead letter:   invoice-INV-7 after 2 attempts: account locked",
		"invoice.sync   INV-7 succeeded after redrive (attempt 1)",
		"scheduling order-42's timeout again is refused",
		"order-42 was paid: its timeout job is cancelled",
		`sms.send       to +15550100 "your code is 4711" (lateness `,
		"done: scheduled 0, processing 0, dead 0",
	)
	if strings.Contains(out, "this must not happen") {
		t.Errorf("the cancelled order timeout ran:\n%s", out)
	}
}
