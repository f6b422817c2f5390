package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestBurstEndToEnd runs the two hand-rolled baselines on a small burst
// against a redis-server of its own and checks that every job is handled
// exactly once.
func TestBurstEndToEnd(t *testing.T) {
	stderr = io.Discard
	srv, err := startRedisServer("redis-server")
	if err != nil {
		t.Fatalf("this test needs redis-server in PATH: %v", err)
	}
	defer srv.Stop()
	admin, err := newRedisAdmin(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	cfg := benchConfig{URL: srv.URL, N: 200, Producers: 8, BatchSize: 50, LostTimeout: 5 * time.Second, Settle: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, sys := range []string{"zsetloop", "luabaseline"} {
		t.Run(sys, func(t *testing.T) {
			res, err := runOne(ctx, admin, cfg, sys, workloadSpec{Kind: "burst"}, 10, 1, "t"+string(rune('a'+i))+"-", false)
			if err != nil {
				t.Fatal(err)
			}
			f := res.Figures
			if f.Enqueued != cfg.N || f.EnqueueErrors != 0 {
				t.Errorf("enqueued %d with %d errors, want %d", f.Enqueued, f.EnqueueErrors, cfg.N)
			}
			if f.Lost != 0 {
				t.Errorf("lost = %d, want 0", f.Lost)
			}
			if f.Duplicates != 0 {
				t.Errorf("duplicates = %d, want 0", f.Duplicates)
			}
			if f.Handled != cfg.N || f.Stray != 0 {
				t.Errorf("handled %d (stray %d), want %d", f.Handled, f.Stray, cfg.N)
			}
			if f.DrainPerSec <= 0 || f.EnqueuePerSec <= 0 {
				t.Errorf("rates not measured: enqueue %v drain %v", f.EnqueuePerSec, f.DrainPerSec)
			}
			if f.EnqueueBatchPerSec == nil {
				t.Error("batch enqueue rate missing")
			}
			if f.Early != 0 {
				t.Errorf("burst jobs are due at enqueue; early = %d", f.Early)
			}
		})
	}
}

func TestLookupSystemsUnknown(t *testing.T) {
	_, err := lookupSystems("zsetloop,nosuch")
	if err == nil {
		t.Fatal("unknown system accepted")
	}
	for _, want := range []string{"nosuch", "zsetloop", "luabaseline", "asynq"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestExpandWorkloads(t *testing.T) {
	ws, err := expandWorkloads("spread,backlog", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		got = append(got, w.Label())
	}
	want := []string{"spread", "backlog=1000", "backlog=0"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := expandWorkloads("nope", 1); err == nil {
		t.Error("unknown workload accepted")
	}
}
