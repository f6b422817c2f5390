// Package layers holds delayq's import rules to the code: it reads the
// table of docs/architecture.md ("Layers, and what each package may
// import"), lists what each package of the module imports with
// `go list -deps -json`, and says where the two disagree. TestImportRules
// runs it on the repository.
//
// A row names a package (or, ending in "/...", every package under it),
// its layer, the delayq packages and the other modules it may import, and
// what it is. Check reports:
//
//   - a package that imports a delayq package or a module (or the standard
//     library's testing) that its row does not list;
//   - a row that lists one that none of its packages imports (the table
//     says what the code imports, no more);
//   - a package with no row, or with more than one, and a row with no
//     package;
//   - a row that lets a package import one of the same layer or above.
//
// Only non-test files count: _test.go files may import any package.
package layers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Header is the header row of the rules table, as docs/architecture.md
// spells it.
const Header = "| package | layer | may import from delayq | may import from other modules | what it is |"

// Testing is the one standard-library package a row must list to import.
const Testing = "testing"

// Rule is one row of the table.
type Rule struct {
	Pattern string   // "broker", or "examples/..." for every package under examples
	Layer   int      // an allowed delayq import must be of a lower layer
	Delayq  []string // delayq packages it may import, relative to the module ("internal/keyspace")
	Other   []string // module paths it may import, and Testing
	Line    int      // line in the document, for messages
}

// Package is what one package's non-test files import.
type Package struct {
	Path   string   // relative to the module: "broker", "cmd/delayq"
	Delayq []string // delayq packages, relative to the module
	Other  []string // modules (by module path) and Testing
}

// Matches tells whether the rule's pattern covers package path p.
func (r Rule) Matches(p string) bool {
	if base, ok := strings.CutSuffix(r.Pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == r.Pattern
}

var (
	token     = regexp.MustCompile("`([^`]*)`")
	tokenList = regexp.MustCompile("^`[^`]+`(, `[^`]+`)*$")
)

// Parse reads the rules table from a document: the first table whose
// header is Header. A malformed row is an error naming its line.
func Parse(doc string) ([]Rule, error) {
	var rules []Rule
	in, n := false, 0
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if !in {
			if line == Header {
				in = true
				if !sc.Scan() {
					return nil, fmt.Errorf("line %d: the table has no separator row", n)
				}
				n++
				if !regexp.MustCompile(`^\|(\s*:?-+:?\s*\|){5}$`).MatchString(strings.TrimSpace(sc.Text())) {
					return nil, fmt.Errorf("line %d: want the separator row of a 5-column table after the header, got %q", n, sc.Text())
				}
			}
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		r, err := parseRow(line, n)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !in {
		return nil, fmt.Errorf("no table with the header %q", Header)
	}
	if len(rules) == 0 {
		return nil, errors.New("the rules table has no rows")
	}
	seen := map[string]int{}
	for _, r := range rules {
		if l, ok := seen[r.Pattern]; ok {
			return nil, fmt.Errorf("line %d: %s has a row already, on line %d", r.Line, r.Pattern, l)
		}
		seen[r.Pattern] = r.Line
	}
	return rules, nil
}

func parseRow(line string, n int) (Rule, error) {
	if !strings.HasSuffix(line, "|") {
		return Rule{}, fmt.Errorf("line %d: a row must end with |: %q", n, line)
	}
	cells := strings.Split(line[1:len(line)-1], "|")
	if len(cells) != 5 {
		return Rule{}, fmt.Errorf("line %d: want 5 cells, got %d: %q", n, len(cells), line)
	}
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	pkg := token.FindAllStringSubmatch(cells[0], -1)
	if len(pkg) != 1 || pkg[0][0] != cells[0] || !validPath(pkg[0][1]) {
		return Rule{}, fmt.Errorf("line %d: the package cell must be one package path in backticks (a/b or a/...), got %q", n, cells[0])
	}
	layer, err := strconv.Atoi(cells[1])
	if err != nil || layer < 0 {
		return Rule{}, fmt.Errorf("line %d: the layer of %s must be a whole number ≥ 0, got %q", n, pkg[0][1], cells[1])
	}
	r := Rule{Pattern: pkg[0][1], Layer: layer, Line: n}
	if r.Delayq, err = list(cells[2]); err != nil {
		return Rule{}, fmt.Errorf("line %d: delayq imports of %s: %w", n, r.Pattern, err)
	}
	if r.Other, err = list(cells[3]); err != nil {
		return Rule{}, fmt.Errorf("line %d: other imports of %s: %w", n, r.Pattern, err)
	}
	for _, p := range r.Delayq {
		if !validPath(p) || strings.HasSuffix(p, "/...") {
			return Rule{}, fmt.Errorf("line %d: %q is not a package path", n, p)
		}
	}
	return r, nil
}

func validPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsAny(p, " \t,") {
		return false
	}
	return !strings.Contains(strings.TrimSuffix(p, "/..."), "...")
}

// list reads a cell: "—" for none, or backticked names separated by ", ".
func list(cell string) ([]string, error) {
	if cell == "—" {
		return nil, nil
	}
	if !tokenList.MatchString(cell) {
		return nil, fmt.Errorf("want — or names in backticks separated by \", \", got %q", cell)
	}
	var out []string
	for _, m := range token.FindAllStringSubmatch(cell, -1) {
		if slices.Contains(out, m[1]) {
			return nil, fmt.Errorf("%s is listed twice", m[1])
		}
		out = append(out, m[1])
	}
	return out, nil
}

// Check compares the packages with the rules and returns every
// disagreement, in the order of the packages and then of the rows.
func Check(pkgs []Package, rules []Rule) []string {
	var errs []string
	used := make([]map[string]bool, len(rules))
	for i := range used {
		used[i] = map[string]bool{}
	}
	matched := make([]bool, len(rules))
	for _, p := range pkgs {
		var idx []int
		for i, r := range rules {
			if r.Matches(p.Path) {
				idx = append(idx, i)
			}
		}
		switch len(idx) {
		case 0:
			errs = append(errs, fmt.Sprintf("%s has no row in the table: add one", p.Path))
			continue
		case 1:
		default:
			var pats []string
			for _, i := range idx {
				pats = append(pats, rules[i].Pattern)
			}
			errs = append(errs, fmt.Sprintf("%s matches %d rows (%s): keep one", p.Path, len(idx), strings.Join(pats, ", ")))
			continue
		}
		i := idx[0]
		r := rules[i]
		matched[i] = true
		for _, d := range p.Delayq {
			used[i]["d:"+d] = true
			if !slices.Contains(r.Delayq, d) {
				errs = append(errs, fmt.Sprintf("%s imports %s, which its row (%s, line %d) does not allow", p.Path, d, r.Pattern, r.Line))
			}
		}
		for _, o := range p.Other {
			used[i]["o:"+o] = true
			if !slices.Contains(r.Other, o) {
				errs = append(errs, fmt.Sprintf("%s imports %s, which its row (%s, line %d) does not allow", p.Path, o, r.Pattern, r.Line))
			}
		}
	}
	for i, r := range rules {
		if !matched[i] {
			errs = append(errs, fmt.Sprintf("row %s (line %d) names no package of the module: remove it", r.Pattern, r.Line))
			continue
		}
		for _, d := range r.Delayq {
			if !used[i]["d:"+d] {
				errs = append(errs, fmt.Sprintf("row %s (line %d) allows %s, which none of its packages imports: remove it", r.Pattern, r.Line, d))
			}
			var to []Rule
			for _, t := range rules {
				if t.Matches(d) {
					to = append(to, t)
				}
			}
			if len(to) != 1 {
				errs = append(errs, fmt.Sprintf("row %s (line %d) allows %s, which has %d rows", r.Pattern, r.Line, d, len(to)))
			} else if to[0].Layer >= r.Layer {
				errs = append(errs, fmt.Sprintf("row %s (line %d, layer %d) allows %s of layer %d: a package may import only lower layers", r.Pattern, r.Line, r.Layer, d, to[0].Layer))
			}
		}
		for _, o := range r.Other {
			if !used[i]["o:"+o] {
				errs = append(errs, fmt.Sprintf("row %s (line %d) allows %s, which none of its packages imports: remove it", r.Pattern, r.Line, o))
			}
		}
	}
	return errs
}

// listed is the part of `go list -json` that Load reads.
type listed struct {
	ImportPath string
	Standard   bool
	DepOnly    bool
	Imports    []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// ModulePath reads the module path from root/go.mod.
func ModulePath(root string) (string, error) {
	src, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(src)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", root)
}

// Load lists the packages whose import path is under the module path of
// root (`go list -deps -json <module>/...` run there) with what their
// non-test files import: in the workspace of go.work, the packages of
// every workspace module under that path (the CLI, the examples, the test
// suites), with GOWORK=off those of root's module alone. Packages are
// named relative to that path; an import of a package under it is a delayq
// import, any other outside the standard library is named by its module.
func Load(root string) ([]Package, error) {
	mod, err := ModulePath(root)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "list", "-deps", "-json", mod+"/...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	return decode(bytes.NewReader(out), mod)
}

func decode(r io.Reader, mod string) ([]Package, error) {
	all := map[string]listed{}
	var order []string
	dec := json.NewDecoder(r)
	for {
		var l listed
		if err := dec.Decode(&l); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading go list's output: %w", err)
		}
		if l.Error != nil {
			return nil, fmt.Errorf("go list: %s: %s", l.ImportPath, l.Error.Err)
		}
		all[l.ImportPath] = l
		if !l.DepOnly {
			order = append(order, l.ImportPath)
		}
	}
	rel := func(p string) (string, bool) {
		if p == mod {
			return ".", true
		}
		return strings.CutPrefix(p, mod+"/")
	}
	var pkgs []Package
	for _, path := range order {
		l := all[path]
		name, ok := rel(path)
		if !ok {
			continue
		}
		p := Package{Path: name}
		for _, imp := range l.Imports {
			if d, ok := rel(imp); ok {
				p.Delayq = append(p.Delayq, d)
				continue
			}
			dep, ok := all[imp]
			switch {
			case !ok:
				return nil, fmt.Errorf("go list: %s imports %s, which it did not list", path, imp)
			case dep.Standard:
				if imp == Testing {
					p.Other = append(p.Other, Testing)
				}
			case dep.Module == nil:
				return nil, fmt.Errorf("go list: %s, imported by %s, is in no module", imp, path)
			default:
				if !slices.Contains(p.Other, dep.Module.Path) {
					p.Other = append(p.Other, dep.Module.Path)
				}
			}
		}
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Path, b.Path) })
	return pkgs, nil
}
