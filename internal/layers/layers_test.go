package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestImportRules holds the code to the table of docs/architecture.md:
// every package's non-test imports, by `go list`, against its row.
func TestImportRules(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Parse(string(doc))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	pkgs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	// The check must have seen the library: a wrong directory or an empty
	// listing would pass every rule.
	want := []string{"job", "broker", "worker", "internal/keyspace"}
	inWorkspace := workspace(t)
	if inWorkspace {
		// In the workspace the other modules are checked too.
		want = append(want, "cmd/delayq/internal/cli", "examples/quickstart", "internal/faulttest/cmd/faultworker", "bench")
	}
	for _, want := range want {
		if !slices.ContainsFunc(pkgs, func(p Package) bool { return p.Path == want }) {
			t.Fatalf("go list found no package %s among %d", want, len(pkgs))
		}
	}
	for _, e := range Check(pkgs, rules) {
		// Outside the workspace (GOWORK=off) only the core module is
		// listed: the rows of the other modules' packages match nothing.
		if !inWorkspace && strings.Contains(e, "names no package of the module") {
			continue
		}
		t.Errorf("docs/architecture.md: %s", e)
	}
}

// workspace reports whether the go command runs in a workspace (go.work).
func workspace(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		t.Fatalf("go env GOWORK: %v", err)
	}
	gowork := strings.TrimSpace(string(out))
	return gowork != "" && gowork != "off"
}

const table = Header + `
|---|---|---|---|---|
| ` + "`retry`" + ` | 0 | — | ` + "`github.com/cenkalti/backoff/v4`" + ` | policies |
| ` + "`job`" + ` | 1 | ` + "`retry`" + ` | — | jobs |
| ` + "`broker`" + ` | 2 | ` + "`job`" + ` | ` + "`github.com/redis/go-redis/v9`" + ` | the broker |
| ` + "`middleware`" + ` | 2 | ` + "`job`, `retry`" + ` | — | never the broker |
| ` + "`examples/...`" + ` | 3 | ` + "`broker`, `job`" + ` | ` + "`testing`" + ` | examples |

Text after the table.
`

func ruleset(t *testing.T) []Rule {
	t.Helper()
	rules, err := Parse("# Doc\n\nSome text.\n\n" + table)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// fine is a module that keeps to the table.
func fine() []Package {
	return []Package{
		{Path: "broker", Delayq: []string{"job"}, Other: []string{"github.com/redis/go-redis/v9"}},
		{Path: "examples/a", Delayq: []string{"broker"}},
		{Path: "examples/b", Delayq: []string{"job"}, Other: []string{Testing}},
		{Path: "job", Delayq: []string{"retry"}},
		{Path: "middleware", Delayq: []string{"job", "retry"}},
		{Path: "retry", Other: []string{"github.com/cenkalti/backoff/v4"}},
	}
}

func TestParseTable(t *testing.T) {
	rules := ruleset(t)
	if len(rules) != 5 {
		t.Fatalf("%d rules, want 5: %+v", len(rules), rules)
	}
	want := Rule{Pattern: "middleware", Layer: 2, Delayq: []string{"job", "retry"}, Line: 10}
	got := rules[3]
	if got.Pattern != want.Pattern || got.Layer != want.Layer || !slices.Equal(got.Delayq, want.Delayq) || got.Other != nil || got.Line != want.Line {
		t.Errorf("row 4 = %+v, want %+v", got, want)
	}
	if !rules[4].Matches("examples") || !rules[4].Matches("examples/a/b") || rules[4].Matches("examplesx") {
		t.Errorf("examples/... matches wrongly")
	}
	if rules[1].Matches("job/x") {
		t.Errorf("job matches job/x")
	}
}

func TestParseRefusesMalformedRows(t *testing.T) {
	row := func(s string) string { return Header + "\n|---|---|---|---|---|\n" + s + "\n" }
	for name, doc := range map[string]string{
		"no table":        "# Nothing here\n",
		"no rows":         row(""),
		"four cells":      row("| `job` | 1 | `retry` | — |"),
		"layer word":      row("| `job` | one | `retry` | — | x |"),
		"two packages":    row("| `job`, `retry` | 1 | — | — | x |"),
		"prose in a list": row("| `job` | 1 | `retry` (mostly) | — | x |"),
		"empty cell":      row("| `job` | 1 |  | — | x |"),
		"pattern import":  row("| `job` | 1 | `retry/...` | — | x |"),
		"listed twice":    row("| `job` | 1 | `retry`, `retry` | — | x |"),
		"row twice":       row("| `job` | 1 | — | — | x |\n| `job` | 1 | — | — | y |"),
		"no separator":    Header + "\n| `job` | 1 | — | — | x |\n",
	} {
		if rules, err := Parse(doc); err == nil {
			t.Errorf("%s: parsed as %+v, want an error", name, rules)
		}
	}
}

func TestCheckPassesAModuleThatKeepsTheRules(t *testing.T) {
	if errs := Check(fine(), ruleset(t)); len(errs) != 0 {
		t.Errorf("errors: %q", errs)
	}
}

// TestCheckCatchesEachBreach changes one thing in a module that keeps the
// rules and wants exactly the error that names it.
func TestCheckCatchesEachBreach(t *testing.T) {
	edit := func(path string, f func(*Package)) []Package {
		pkgs := fine()
		for i := range pkgs {
			if pkgs[i].Path == path {
				f(&pkgs[i])
			}
		}
		return pkgs
	}
	for name, c := range map[string]struct {
		pkgs  []Package
		rules func([]Rule) []Rule
		want  string
	}{
		"a forbidden edge": {
			pkgs: edit("middleware", func(p *Package) { p.Delayq = append(p.Delayq, "broker") }),
			want: "middleware imports broker, which its row (middleware, line 10) does not allow",
		},
		"a module not listed": {
			pkgs: edit("job", func(p *Package) { p.Other = []string{"github.com/redis/go-redis/v9"} }),
			want: "job imports github.com/redis/go-redis/v9, which its row (job, line 8) does not allow",
		},
		"testing in the library": {
			pkgs: edit("broker", func(p *Package) { p.Other = append(p.Other, Testing) }),
			want: "broker imports testing, which its row (broker, line 9) does not allow",
		},
		"a package without a row": {
			pkgs: append(fine(), Package{Path: "fleet"}),
			want: "fleet has no row in the table: add one",
		},
		"an allowance no longer used": {
			pkgs: edit("middleware", func(p *Package) { p.Delayq = []string{"job"} }),
			want: "row middleware (line 10) allows retry, which none of its packages imports: remove it",
		},
		"a module no longer used": {
			pkgs: edit("retry", func(p *Package) { p.Other = nil }),
			want: "row retry (line 7) allows github.com/cenkalti/backoff/v4, which none of its packages imports: remove it",
		},
		"a row without packages": {
			pkgs: slices.DeleteFunc(fine(), func(p Package) bool { return strings.HasPrefix(p.Path, "examples/") }),
			want: "row examples/... (line 11) names no package of the module: remove it",
		},
		"an edge up the layers": {
			pkgs: edit("retry", func(p *Package) { p.Delayq = []string{"job"} }),
			rules: func(r []Rule) []Rule {
				r[0].Delayq = []string{"job"}
				return r
			},
			want: "row retry (line 7, layer 0) allows job of layer 1: a package may import only lower layers",
		},
		"an edge within a layer": {
			pkgs: edit("middleware", func(p *Package) { p.Delayq = append(p.Delayq, "broker") }),
			rules: func(r []Rule) []Rule {
				r[3].Delayq = append(r[3].Delayq, "broker")
				return r
			},
			want: "row middleware (line 10, layer 2) allows broker of layer 2: a package may import only lower layers",
		},
		"an allowance of a package without a row": {
			pkgs: edit("broker", func(p *Package) { p.Delayq = append(p.Delayq, "internal/gone") }),
			rules: func(r []Rule) []Rule {
				r[2].Delayq = append(r[2].Delayq, "internal/gone")
				return r
			},
			want: "row broker (line 9) allows internal/gone, which has 0 rows",
		},
		"two rows for one package": {
			pkgs: fine(),
			rules: func(r []Rule) []Rule {
				return append(r, Rule{Pattern: "examples/a", Layer: 3, Delayq: []string{"broker"}, Line: 9})
			},
			want: "examples/a matches 2 rows (examples/..., examples/a): keep one",
		},
	} {
		rules := ruleset(t)
		if c.rules != nil {
			rules = c.rules(rules)
		}
		errs := Check(c.pkgs, rules)
		if !slices.Contains(errs, c.want) {
			t.Errorf("%s: errors %q, want one %q", name, errs, c.want)
		}
	}
}

// TestDecodeNamesModules reads go list's output: delayq imports by their
// path in the module, others by their module, the standard library only
// for testing, and dependencies not matched by ./... skipped.
func TestDecodeNamesModules(t *testing.T) {
	out := `{"ImportPath":"errors","Standard":true,"DepOnly":true}
{"ImportPath":"testing","Standard":true,"DepOnly":true}
{"ImportPath":"github.com/redis/go-redis/v9/internal/pool","DepOnly":true,"Module":{"Path":"github.com/redis/go-redis/v9"}}
{"ImportPath":"go.opentelemetry.io/otel/attribute","DepOnly":true,"Module":{"Path":"go.opentelemetry.io/otel"}}
{"ImportPath":"example.com/m/job","Imports":["errors"],"Module":{"Path":"example.com/m"}}
{"ImportPath":"example.com/m/kit","Imports":["errors","example.com/m/job","github.com/redis/go-redis/v9/internal/pool","go.opentelemetry.io/otel/attribute","testing"],"Module":{"Path":"example.com/m"}}
`
	pkgs, err := decode(strings.NewReader(out), "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 || pkgs[0].Path != "job" || pkgs[0].Delayq != nil || pkgs[0].Other != nil {
		t.Fatalf("packages %+v", pkgs)
	}
	kit := pkgs[1]
	if kit.Path != "kit" || !slices.Equal(kit.Delayq, []string{"job"}) ||
		!slices.Equal(kit.Other, []string{"github.com/redis/go-redis/v9", "go.opentelemetry.io/otel", Testing}) {
		t.Errorf("kit = %+v", kit)
	}
	if _, err := decode(strings.NewReader(`{"ImportPath":"example.com/m/x","Error":{"Err":"no Go files"}}`), "example.com/m"); err == nil {
		t.Error("a package error was not reported")
	}
}
