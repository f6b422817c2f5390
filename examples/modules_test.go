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

// pinnedPgx is an older pgx than any delayq module builds with.
const pinnedPgx = "v5.8.0"

// A user's module that imports job, broker and worker and pins its own
// pgx keeps that pin through "go mod tidy": the core module requires no
// SQL driver (docs/architecture.md, "Modules"). The module points at this
// checkout with a replace and is tidied outside the workspace, as a
// user's module is; it needs the module proxy for pgx and for the go.mod
// files of delayq's requirements, as every fresh checkout does (README).
func TestConsumerKeepsItsPgxPin(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/consumer\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/delayq/delayq v0.0.0-00010101000000-000000000000\n\tgithub.com/jackc/pgx/v5 " + pinnedPgx + "\n)\n\n" +
		"replace github.com/delayq/delayq => " + root + "\n"
	mainGo := `package main

import (
	_ "github.com/jackc/pgx/v5/stdlib"

	_ "github.com/delayq/delayq/broker"
	_ "github.com/delayq/delayq/job"
	_ "github.com/delayq/delayq/worker"
)

func main() {}
`
	for name, text := range map[string]string{"go.mod": goMod, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Outside the workspace, with no -mod flag: "go mod tidy" as a user
	// runs it.
	env := append(withoutEnv(withoutEnv(os.Environ(), "GOWORK"), "GOFLAGS"), "GOWORK=off", "GOFLAGS="+withoutModFlag(goEnv(t, "GOFLAGS")))
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("go", "mod", "download", "github.com/jackc/pgx/v5@"+pinnedPgx); err != nil {
		t.Fatalf("go mod download pgx %s (through GOPROXY=%s): %v\n%s", pinnedPgx, goEnv(t, "GOPROXY"), err, out)
	}
	if out, err := run("go", "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	out, err := run("go", "list", "-m", "-f", "{{.Version}}", "github.com/jackc/pgx/v5")
	if err != nil {
		t.Fatalf("go list -m pgx: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(out); got != pinnedPgx {
		t.Errorf("go mod tidy moved the pgx pin from %s to %s", pinnedPgx, got)
	}
	// Nothing of delayq requires pgx at all.
	graph, err := run("go", "mod", "graph")
	if err != nil {
		t.Fatalf("go mod graph: %v\n%s", err, graph)
	}
	for line := range strings.Lines(graph) {
		from, to, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(from, "github.com/delayq/delayq") && strings.HasPrefix(to, "github.com/jackc/pgx") {
			t.Errorf("delayq's module requires pgx: %s", strings.TrimSpace(line))
		}
	}
	if out, err := run("go", "build", "-o", os.DevNull, "."); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// withoutModFlag drops a -mod=... flag from a GOFLAGS value.
func withoutModFlag(flags string) string {
	var kept []string
	for _, f := range strings.Fields(flags) {
		if !strings.HasPrefix(f, "-mod=") {
			kept = append(kept, f)
		}
	}
	return strings.Join(kept, " ")
}
