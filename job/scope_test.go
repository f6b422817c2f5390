package job_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// TestOptionScopeIsCheckedByTheCompiler type-checks small programs against
// package job: an option that may only be set per job does not compile
// when given to New, one that may only be set on a type does not compile
// per job, and the shared ones compile in both places.
func TestOptionScopeIsCheckedByTheCompiler(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	check := func(body string) error {
		src := `package p

import (
	"time"

	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

var _ = time.Second
var _ retry.Policy

type A struct{}

func f() {
	typ := job.New[A]("t")
	_ = typ
	` + body + `
}
`
		f, err := parser.ParseFile(fset, "p.go", src, 0)
		if err != nil {
			t.Fatalf("parse %q: %v", body, err)
		}
		_, err = (&types.Config{Importer: imp}).Check("p", fset, []*ast.File{f}, nil)
		return err
	}
	perJob := []string{`job.In(time.Second)`, `job.At(time.Now())`, `job.ID("x")`, `job.Header("k", "v")`,
		`job.WithBackoff(retry.Exponential{})`, `job.Replace()`, `job.Debounce("k", time.Second)`, `job.ExpireAt(time.Now())`, `job.Then()`, `job.Key("k")`}
	typeOnly := []string{`job.WithCodec(job.JSON())`, `job.Retry(retry.Constant(time.Second))`, `job.KeyFrom(func(A) string { return "k" })`}
	shared := []string{`job.Queue("q")`, `job.MaxRetries(1)`, `job.Timeout(time.Second)`, `job.Retain(time.Second)`,
		`job.Unique(0)`, `job.UniqueIncludeDead()`, `job.ExpireIn(time.Second)`, `job.DropExpired()`}
	onType := func(o string) string { return `_ = job.New[A]("u", ` + o + `)` }
	perEnqueue := func(o string) string { return `_, _ = typ.Envelope(A{}, ` + o + `)` }
	for _, o := range perJob {
		if err := check(onType(o)); err == nil || !strings.Contains(err.Error(), "does not implement job.TypeOption") {
			t.Errorf("%s given to New: err = %v, want a compile error", o, err)
		}
		if err := check(perEnqueue(o)); err != nil {
			t.Errorf("%s per job: %v", o, err)
		}
	}
	for _, o := range typeOnly {
		if err := check(perEnqueue(o)); err == nil || !strings.Contains(err.Error(), "does not implement job.Option") {
			t.Errorf("%s per job: err = %v, want a compile error", o, err)
		}
		if err := check(onType(o)); err != nil {
			t.Errorf("%s given to New: %v", o, err)
		}
	}
	for _, o := range shared {
		if err := check(onType(o)); err != nil {
			t.Errorf("%s given to New: %v", o, err)
		}
		if err := check(perEnqueue(o)); err != nil {
			t.Errorf("%s per job: %v", o, err)
		}
	}
}
