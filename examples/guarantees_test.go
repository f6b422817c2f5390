package examples_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGuaranteesNameTheirTests: every row of docs/guarantees.md names at
// least one test or fuzz target, and every test or fuzz target a doc names
// is defined in a _test.go file of the repository.
func TestGuaranteesNameTheirTests(t *testing.T) {
	root := ".."
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w+)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Z0-9]\\w*)`")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(src), -1) {
			if !defined[m[1]] {
				t.Errorf("%s names %s, which no _test.go file defines", filepath.Base(doc), m[1])
			}
		}
		if filepath.Base(doc) != "guarantees.md" {
			continue
		}
		rows := 0
		for line := range strings.Lines(string(src)) {
			if !regexp.MustCompile(`^\| [0-9]+[a-z]? \|`).MatchString(line) {
				continue
			}
			rows++
			if !named.MatchString(line) {
				t.Errorf("guarantees.md: row %q names no test", strings.Fields(line)[1])
			}
		}
		if rows < 30 {
			t.Errorf("guarantees.md: %d rows read; the table's format changed", rows)
		}
	}
}
