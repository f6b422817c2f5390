package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBurstEndToEnd runs the two hand-rolled baselines and delayq on a small burst
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
	for i, sys := range []string{"zsetloop", "luabaseline", "bareloop", "delayq", "delayq-prefetch"} {
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
			// Every system stores each job with at least one command and
			// handles it with at least one more; the luabaseline enqueue is
			// two pipelined commands per job, one request (plus the HELLO of each
			// new connection).
			if e := f.EnqueueRedis; e == nil || e.CommandsPerJob < 1 || e.RequestsPerJob <= 0 {
				t.Errorf("enqueue requests/commands per job not measured: %+v", e)
			} else if sys == "luabaseline" && (e.CommandsPerJob < 2 || e.CommandsPerJob > 2.2 || e.RequestsPerJob < 0.9 || e.RequestsPerJob > 1.2) {
				t.Errorf("luabaseline enqueue: %.3f commands and %.3f requests per job, want 2 and about 1", e.CommandsPerJob, e.RequestsPerJob)
			}
			if d := f.WindowRedis; d == nil || d.CommandsPerJob <= 0 || d.RequestsPerJob <= 0 {
				t.Errorf("drain requests/commands per job not measured: %+v", d)
			}
		})
	}
}

// TestBareLoop runs the ten-claimer loop on a spread and on bursts at
// concurrency 10 and 100 (more claimed ids in flight than handlers, and
// fewer): every job handled once, none before its ready time, one enqueue
// script (ZADD + HSET) per job, and claims that carry many jobs each.
func TestBareLoop(t *testing.T) {
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

	cfg := benchConfig{URL: srv.URL, N: 1000, Producers: 8, BatchSize: 50, LostTimeout: 5 * time.Second, Settle: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, tc := range []struct {
		kind string
		conc int
	}{{"burst", 10}, {"burst", 100}, {"spread", 10}} {
		t.Run(tc.kind+"/"+strconv.Itoa(tc.conc), func(t *testing.T) {
			res, err := runOne(ctx, admin, cfg, "bareloop", workloadSpec{Kind: tc.kind}, tc.conc, 1, "b"+strconv.Itoa(i)+"-", false)
			if err != nil {
				t.Fatal(err)
			}
			f := res.Figures
			if f.Enqueued != cfg.N || f.EnqueueErrors != 0 || f.Handled != cfg.N || f.Stray != 0 {
				t.Errorf("enqueued %d (%d errors), handled %d (stray %d), want %d", f.Enqueued, f.EnqueueErrors, f.Handled, f.Stray, cfg.N)
			}
			if f.Lost != 0 || f.Duplicates != 0 || f.Early != 0 {
				t.Errorf("lost %d, duplicates %d, early %d; want 0", f.Lost, f.Duplicates, f.Early)
			}
			if f.EnqueueBatchPerSec == nil {
				t.Error("batch enqueue rate missing")
			}
			if tc.kind == "burst" {
				e, d := f.EnqueueRedis, f.WindowRedis
				if e == nil || d == nil {
					t.Fatalf("Redis counters not measured: enqueue %+v, drain %+v", e, d)
				}
				n := float64(cfg.N)
				// On a fresh server each producer's first EVALSHA may fail
				// (NOSCRIPT) and be followed by an EVAL.
				scripts := e.Commands["evalsha"].Calls + e.Commands["eval"].Calls
				if e.Commands["zadd"].Calls != n || e.Commands["hset"].Calls != n ||
					scripts < n || scripts > n+float64(cfg.Producers) {
					t.Errorf("enqueue: %+v, want one script call (ZADD, HSET) per job", e)
				}
				// Per job: the ack's ZREM and HDEL (the window ends at the
				// last handler start, so up to conc acks fall after it), and
				// a share of claims of up to 100 jobs each.
				if d.Commands["hdel"].Calls < n-float64(tc.conc) || d.Commands["hdel"].Calls > n || d.ScriptsPerJob > 0.5 {
					t.Errorf("drain: %+v, want an ack per job and claims of many jobs", d)
				}
			}
		})
	}
}

// TestAdminWaitsForSlowReplies: the harness's own connection waits for a
// command that keeps Redis busy longer than go-redis's default read
// timeout (5 s), as FLUSHALL of a 10 M backlog does, instead of failing
// the next runs with an i/o timeout.
func TestAdminWaitsForSlowReplies(t *testing.T) {
	t.Parallel()
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
	// A script that returns after 6 s of the server's own clock.
	busy := `local t0 = redis.call('TIME')
local s0 = tonumber(t0[1]) + tonumber(t0[2]) / 1e6
while true do
  local t = redis.call('TIME')
  if tonumber(t[1]) + tonumber(t[2]) / 1e6 - s0 >= 6 then return 1 end
end`
	if err := admin.c.Eval(context.Background(), busy, nil).Err(); err != nil {
		t.Fatalf("admin connection gave up on a 6 s reply: %v", err)
	}
	if err := admin.FlushAll(context.Background()); err != nil {
		t.Fatalf("flushall after the slow reply: %v", err)
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

func TestLatenessSVG(t *testing.T) {
	t.Parallel()
	mk := func(sys string, conc int, lat ...float64) RunResult {
		return RunResult{System: sys, Workload: "spread", Concurrency: conc, lateness: lat}
	}
	runs := []RunResult{
		mk("a", 10, -0.5, 0.2, 1, 3, 40),
		mk("a", 10, 0.1, 0.3, 2),
		mk("b", 10, 500, 900, 1200),
		mk("a", 100, 0.5),
		{System: "b", Workload: "burst", Concurrency: 100, lateness: []float64{1}},
	}
	series := spreadSeries(runs, []string{"a", "b"}, []int{10, 100})
	if len(series) != 3 {
		t.Fatalf("got %d series, want a@10, b@10, a@100", len(series))
	}
	if s := series[0]; s.System != "a" || s.Rounds != 2 || len(s.Sorted) != 8 || s.Sorted[0] != -0.5 || s.Sorted[7] != 40 {
		t.Fatalf("a@10 pooled wrong: %+v", s)
	}
	path := t.TempDir() + "/l.svg"
	if err := writeLatenessSVG(path, series, 5, "t <&>"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	lines, panels := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, data)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				lines++
			case "rect":
				panels++
			}
		}
	}
	if lines != 3 || panels != 3 { // one background, two panel frames
		t.Fatalf("%d curves and %d rects, want 3 and 3", lines, panels)
	}
	for _, want := range []string{"a: p50 0.30", "max 1200 ms", "negative 12.5%", "concurrency 100"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if err := writeLatenessSVG(path, nil, 5, "x"); err == nil {
		t.Error("empty series accepted")
	}
}

// TestMarkdownTable checks the -table output on made-up runs: medians and
// ranges over rounds, ratios taken within each round against the row's
// reference (the loop for drain, asynq for enqueue, the best other system
// for lateness), n/a where a figure is missing, the correctness totals and
// the backlog table.
func TestMarkdownTable(t *testing.T) {
	t.Parallel()
	f64 := func(v float64) *float64 { return &v }
	rep := &Report{Config: reportConfig{N: 100, Backlog: 1000, Concurrency: []int{10}, Rounds: 2, Producers: 8}}
	add := func(sys, workload string, round int, f Figures) {
		rep.Runs = append(rep.Runs, RunResult{System: sys, Workload: workload, Concurrency: 10, Round: round, Figures: f})
	}
	burst := func(drain, enq float64) Figures {
		return Figures{Handled: 100, Enqueued: 100, DrainPerSec: drain, EnqueuePerSec: enq,
			EnqueueRedisCPUUsPerJob: f64(5), RedisCPUSecPer100k: f64(1), // 5 + 10 µs
			EnqueueRedis: &redisDelta{RequestsPerJob: 0.5}, WindowRedis: &redisDelta{RequestsPerJob: 0.25}}
	}
	// Round 1: delayq 0.5× the loop's drain; round 2: 1.0×.
	add("delayq", "burst", 1, burst(50000, 30000))
	add("bareloop", "burst", 1, burst(100000, 20000))
	add("asynq", "burst", 1, burst(30000, 60000))
	add("delayq", "burst", 2, burst(80000, 30000))
	add("bareloop", "burst", 2, burst(80000, 20000))
	add("asynq", "burst", 2, burst(30000, 30000))
	spread := func(p99 float64, early int) Figures {
		return Figures{Handled: 100, Enqueued: 100, EnqueuePerSec: 1, LatenessP99Ms: f64(p99), Early: early}
	}
	add("delayq", "spread", 1, spread(4, 0))
	add("bareloop", "spread", 1, spread(8, 0))
	add("asynq", "spread", 1, spread(5000, 3))
	rep.Runs = append(rep.Runs, RunResult{System: "delayq", Workload: "spread", Concurrency: 10, Round: 2, Error: "boom"})
	add("delayq", "backlog=1000", 1, Figures{Handled: 100, Enqueued: 100, EnqueuePerSec: 900, DrainPerSec: 800, BacklogBytesPerJob: f64(250), Lost: 2})
	add("delayq", "backlog=0", 1, Figures{Handled: 100, Enqueued: 100, EnqueuePerSec: 1000, DrainPerSec: 1000})
	rep.Memory = []MemoryResult{{Round: 1, System: "delayq", BytesPerJob: 300}, {Round: 1, System: "bareloop", BytesPerJob: 200}}

	var b strings.Builder
	writeMarkdownTable(&b, rep, []string{"asynq", "bareloop", "delayq"}, "delayq", []string{"-n", "100"}, "commit abc", "1 2 3", "4 5 6")
	out := b.String()
	for _, want := range []string{
		"| | asynq | bareloop | delayq | delayq / ref |",
		"| burst drain, concurrency 10 | 30.0 k/s | 90.0 k/s [80.0–100.0] | 65.0 k/s [50.0–80.0] | 0.75× bareloop [0.50–1.00] |",
		"| single enqueue, burst, c=10 | 45.0 k/s [30.0–60.0] | 20.0 k/s | 30.0 k/s | 0.75× asynq [0.50–1.00] |",
		"| single enqueue, spread, c=10 | 0.0 k/s | 0.0 k/s | 0.0 k/s | 1.00× asynq |",
		"| Redis memory per queued job | n/a | 200 B | 300 B | 1.50× bareloop |",
		"| Redis CPU per job, enqueue + drain, burst c=10 | 15.0 µs | 15.0 µs | 15.0 µs | 1.00× bareloop |",
		"| Redis requests per job, enqueue + drain, burst c=10 | 0.75 | 0.75 | 0.75 | 1.00× bareloop |",
		"| client allocations per drained job, burst c=10 | n/a | n/a | n/a | n/a |",
		"| p99 lateness, spread, c=10 | 5000 ms | 8.00 ms | 4.00 ms | 0.50× bareloop |",
		"| early / lost / duplicated jobs, all runs | 3 / 0 / 0 | 0 / 0 / 0 | 0 / 2 / 0 (1 runs failed) | |",
		"| delayq | 10 | single enqueue | 0.9 k/s | 1.0 k/s | 0.90× |",
		"| delayq | 10 | drain | 0.8 k/s | 1.0 k/s | 0.80× |",
		"| delayq | 10 | used_memory per backlog job | 250 B | | |",
		"load average (1, 5, 15 min) 1 2 3 at the start, 4 5 6 at the end",
		"go run . -n 100",
		"delayq at commit abc;",
		"8 producers, 2 rounds (systems interleaved within each round), payloads",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q\n%s", want, out)
		}
	}
}
