package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
)

// wrapped marks a protocol a test wrapped.
type wrapped struct{ protocol.Broker }

// fakeTB records what Intercept reports and the cleanups it registers.
type fakeTB struct {
	failed   string
	cleanups []func()
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Cleanup(c func())                  { f.cleanups = append(f.cleanups, c) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

// TestInterceptIsHeldByTheBroker: the worker gets a broker's protocol from
// the broker value itself; a test's wrap is held by that broker alone
// (another broker on the same client is not wrapped), a second wrap of it
// is refused, and the wrap ends with the test.
func TestInterceptIsHeldByTheBroker(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	other, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := protocol.For(tb.b).(wrapped); ok {
		t.Fatal("a broker's protocol is wrapped before any intercept")
	}
	ft := &fakeTB{}
	protocol.Intercept(ft, tb.b, func(p protocol.Broker) protocol.Broker { return wrapped{p} })
	if ft.failed != "" || len(ft.cleanups) != 1 {
		t.Fatalf("intercept: failed %q, %d cleanups", ft.failed, len(ft.cleanups))
	}
	if _, ok := protocol.For(tb.b).(wrapped); !ok {
		t.Error("the intercepted broker's protocol is not the wrap")
	}
	if _, ok := protocol.For(other).(wrapped); ok {
		t.Error("another broker's protocol is wrapped too")
	}
	second := &fakeTB{}
	protocol.Intercept(second, tb.b, func(p protocol.Broker) protocol.Broker { return p })
	if !strings.Contains(second.failed, "intercepted already") || len(second.cleanups) != 0 {
		t.Errorf("a second intercept: failed %q, %d cleanups", second.failed, len(second.cleanups))
	}
	ft.cleanups[0]()
	if _, ok := protocol.For(tb.b).(wrapped); ok {
		t.Error("the wrap outlived its test")
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "is not a *broker.Broker") {
			t.Errorf("For of something else: %v", r)
		}
	}()
	protocol.For(struct{}{})
}
