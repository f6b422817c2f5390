package dashboard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
)

func newDashboard(t *testing.T, opts dashboard.Options) *dashboard.Dashboard {
	t.Helper()
	rdb, ns := redistestNew(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestServeRefusesRemoteAddresses(t *testing.T) {
	t.Parallel()
	open := newDashboard(t, dashboard.Options{})
	locked := newDashboard(t, dashboard.Options{BearerToken: "t"})
	for _, c := range []struct {
		addr        string
		d           *dashboard.Dashboard
		allowRemote bool
	}{
		{":0", open, false},
		{"0.0.0.0:0", open, false},
		{"[::]:0", open, false},
		{"192.0.2.1:0", locked, false},
		{"0.0.0.0:0", open, true}, // remote but no authentication
	} {
		err := dashboard.Serve(t.Context(), c.addr, c.d, dashboard.ServeOptions{AllowRemote: c.allowRemote})
		if !errors.Is(err, dashboard.ErrNotLoopback) {
			t.Errorf("Serve(%q, remote %v): %v, want ErrNotLoopback", c.addr, c.allowRemote, err)
		}
	}
	if err := dashboard.Serve(t.Context(), "nonsense", open, dashboard.ServeOptions{}); err == nil || errors.Is(err, dashboard.ErrNotLoopback) {
		t.Errorf("bad address: %v", err)
	}
	if err := dashboard.Serve(t.Context(), "", nil, dashboard.ServeOptions{}); err == nil {
		t.Error("nil dashboard: no error")
	}
}

// serve runs Serve in the background and returns the address it listens
// on and a stop function that waits for it to return.
func serve(t *testing.T, addr string, d *dashboard.Dashboard, opts dashboard.ServeOptions) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	opts.Ready = func(a net.Addr) { ready <- a }
	done := make(chan error, 1)
	go func() { done <- dashboard.Serve(ctx, addr, d, opts) }()
	select {
	case a := <-ready:
		return a.String(), func() error { cancel(); return <-done }
	case err := <-done:
		cancel()
		t.Fatalf("Serve(%q): %v", addr, err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("Serve did not start within 10s")
	}
	return "", nil
}

func TestServeLoopbackAndShutdown(t *testing.T) {
	t.Parallel()
	d := newDashboard(t, dashboard.Options{})
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		got, stop := serve(t, addr, d, dashboard.ServeOptions{})
		res, err := http.Get("http://" + got + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		http.DefaultClient.CloseIdleConnections()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: GET / = %d", addr, res.StatusCode)
		}
		if err := stop(); err != nil {
			t.Fatalf("%s: Serve returned %v after ctx was cancelled", addr, err)
		}
		if _, err := http.Get("http://" + got + "/"); err == nil {
			t.Fatalf("%s: still serving after shutdown", addr)
		}
	}
	// A port in use is an error, not a hang.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := dashboard.Serve(t.Context(), ln.Addr().String(), d, dashboard.ServeOptions{}); err == nil {
		t.Fatal("Serve on a port in use: no error")
	}
}
