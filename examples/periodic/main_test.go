package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunsWithoutRedisURL builds the example and runs it as a user would,
// with REDIS_URL unset (the embedded server): it exits 0 and prints its
// ticks, each handled once, and the schedules.
func TestRunsWithoutRedisURL(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "periodic")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	for _, want := range []string{
		"using embedded redis (REDIS_URL unset)",
		"replica-a: scheduler started", "replica-b: scheduler started",
		"health.ping billing: job ping-billing@",
		"3 ticks, each handled once, though two schedulers enqueued every one",
		`schedule nightly-sales "30 2 * * *" zone Europe/Berlin missed: once`,
		`schedule ping-billing  "@every 1s"  zone UTC           missed: once`,
		"outcome success",
		"loading a zone that does not exist: unknown time zone Europe/Berlinn",
		`declaring a bad expression: periodic: invalid: schedule "every-minute": cron expression "61 * * * *"`,
		"] done",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
