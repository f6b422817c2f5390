package delayqtest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/delayq/delayq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// fakeTB is a testing.TB that records failures instead of failing the
// real test, so that a test can check that an assertion fails, and says
// why. Fatal calls end the goroutine as testing.T's do.
type fakeTB struct {
	testing.TB // the real test, for everything not overridden
	mu         sync.Mutex
	failed     bool
	msgs       []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) fail(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.msgs = append(f.msgs, msg)
}

func (f *fakeTB) Errorf(format string, args ...any) { f.fail(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Error(args ...any)                 { f.fail(fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fakeTB) Fatal(args ...any) { f.fail(fmt.Sprint(args...)); runtime.Goexit() }
func (f *fakeTB) FailNow()          { f.fail("FailNow"); runtime.Goexit() }
func (f *fakeTB) Fail()             { f.fail("Fail") }
func (f *fakeTB) Failed() bool      { f.mu.Lock(); defer f.mu.Unlock(); return f.failed }

// check runs fn with a fakeTB in a goroutine of its own (so that Fatal
// can end it) and returns whether it failed and what it said.
func check(t *testing.T, fn func(tb testing.TB)) (failed bool, msg string) {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.Failed(), strings.Join(f.msgs, "\n")
}

// mustFail fails t unless fn fails its TB with a message containing each
// of want.
func mustFail(t *testing.T, fn func(tb testing.TB), want ...string) {
	t.Helper()
	failed, msg := check(t, fn)
	if !failed {
		t.Fatalf("the assertion passed; it should have failed")
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("failure message %q lacks %q", msg, w)
		}
	}
}

// mustPass fails t if fn fails its TB.
func mustPass(t *testing.T, fn func(tb testing.TB)) {
	t.Helper()
	if failed, msg := check(t, fn); failed {
		t.Fatalf("the assertion failed, it should have passed: %s", msg)
	}
}

var ctx = context.Background()
