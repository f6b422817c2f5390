package outbox

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestNamesInDocs checks the table of docs/outbox.md's "Names" section
// against the names the package's constants give: every metric (metric*),
// label (label*), outcome (outcome*) and the scope (scopeName). A name
// added, renamed or dropped on one side fails it.
func TestNamesInDocs(t *testing.T) {
	code := namesInCode(t)
	doc := namesInDoc(t, "../docs/outbox.md", "## Names")
	for _, n := range code {
		if !slices.Contains(doc, n) {
			t.Errorf("docs/outbox.md does not list %s", n)
		}
	}
	for _, n := range doc {
		if !slices.Contains(code, n) {
			t.Errorf("docs/outbox.md lists %s, which the code does not have", n)
		}
	}
	if len(code) < 14 {
		t.Errorf("found %d names in the code: %v", len(code), code)
	}
}

// kinds maps a constant's name, or its prefix, to its kind in the doc.
var kinds = []struct{ prefix, kind string }{
	{"scopeName", "scope"},
	{"metric", "metric"},
	{"label", "label"},
	{"outcome", "outcome"},
}

// namesInCode returns "kind name" for every constant of the package's
// non-test files named as kinds says, its value resolved through the
// constants it refers to.
func namesInCode(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]ast.Expr{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						values[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var resolve func(e ast.Expr) string
	resolve = func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(e.Value)
			if err != nil {
				t.Fatal(err)
			}
			return s
		case *ast.CallExpr: // attribute.Key("...")
			if len(e.Args) == 1 {
				return resolve(e.Args[0])
			}
		case *ast.Ident:
			if v, ok := values[e.Name]; ok {
				return resolve(v)
			}
		}
		t.Fatalf("cannot resolve %#v", e)
		return ""
	}
	var out []string
	for name, v := range values {
		for _, k := range kinds {
			rest, ok := strings.CutPrefix(name, k.prefix)
			if ok && (rest == "" || rest[0] >= 'A' && rest[0] <= 'Z') {
				out = append(out, k.kind+" "+resolve(v))
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// namesInDoc returns "kind name" for every row of the first table after
// heading in the doc at path: its first cell and its second, unquoted.
func namesInDoc(t *testing.T, path, heading string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(raw), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", path, heading)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var out []string
	for line := range strings.Lines(sec) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[2]), "`") {
			continue
		}
		out = append(out, strings.TrimSpace(cells[1])+" "+strings.Trim(strings.TrimSpace(cells[2]), "`"))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
