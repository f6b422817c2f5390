// Package docnames holds a doc to the names a package's constants give:
// the metric, label, attribute and header names a package documents for
// its users in a table of docs/, which the tests of that package compare
// with its constants in both directions.
package docnames

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

// Kind maps a constant's name, or its prefix, to its kind in the doc's
// table (the first cell of a row).
type Kind struct{ Prefix, Kind string }

// Check fails t for every name the code gives and the doc at path does not
// list under heading, and for every name the doc lists and the code does
// not give; and when the code gives fewer than min names (a wrong
// directory or prefix would find none and pass).
func Check(t testing.TB, kinds []Kind, path, heading string, min int) {
	t.Helper()
	code := InCode(t, kinds)
	doc := InDoc(t, path, heading)
	for _, n := range code {
		if !slices.Contains(doc, n) {
			t.Errorf("%s does not list %s", path, n)
		}
	}
	for _, n := range doc {
		if !slices.Contains(code, n) {
			t.Errorf("%s lists %s, which the code does not have", path, n)
		}
	}
	if len(code) < min {
		t.Errorf("found %d names in the code, want at least %d: %v", len(code), min, code)
	}
}

// InCode returns "kind name" for every constant of the non-test files of
// the package in the working directory (a test's package) whose name is a
// Kind's Prefix, alone or followed by an upper-case letter; its value is
// resolved through the constants it refers to and through one-argument
// conversions such as attribute.Key("...").
func InCode(t testing.TB, kinds []Kind) []string {
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
			rest, ok := strings.CutPrefix(name, k.Prefix)
			if ok && (rest == "" || rest[0] >= 'A' && rest[0] <= 'Z') {
				out = append(out, k.Kind+" "+resolve(v))
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// InDoc returns "kind name" for every row of the first table after
// heading in the doc at path: its first cell and its second, unquoted.
func InDoc(t testing.TB, path, heading string) []string {
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
