package faulttest_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// Clock skew between hosts cannot be made on one machine without faking a
// process's clock, and Go reads the clock without libc, so no preload library
// can skew a worker. What is checked instead is why skew cannot matter: the
// worker and the broker never read the wall clock to decide anything (this
// test reads their source), and due-ness is decided by the "now" that the
// scripts take from the server's TIME (TestDueTimeComesFromTheServer shows a
// job starts by the server's clock, and that a broker whose scripts were
// given a clock 5 minutes fast -- what a worker trusting its own clock would
// do -- claims a job 2 minutes early while the real workers beside it do
// not).

// wallClockAllowed lists the functions of worker and broker that may read
// the wall clock, and why.
var wallClockAllowed = map[string]string{
	"broker.(*Broker).createdNow": "CreatedAt, a record of when a job was made; never compared with a ready time",
	"broker.(*Broker).shards":     "how long an undeclared queue's shard count stays cached; a local interval, never compared with a ready time",
	// The adaptive prefetch (worker.Options.Prefetch 0) is sized from two
	// durations on the monotonic clock: a claim's round trip and how long
	// handlers run. Neither is compared with a ready time or a lease.
	"worker.(*Worker).claim": "the claim's round trip, a duration that sizes the prefetch; when a failed shard's back-off ends, a local interval",
	"worker.(*Worker).fetch": "when a failed shard's back-off ends, a local interval",
	"worker.(*Worker).run":   "how long a handler ran, a duration that sizes the prefetch; how long since the lease was last confirmed (compared with the lease, a duration)",
	// A held lease is known live for a lease from when the claim or extend
	// that confirmed it was sent: the time since then (on the monotonic
	// clock, or on the wall clock when more has passed by it: a suspended
	// machine) is compared with the lease, never with a server time.
	"worker.(*Worker).extend":       "when the extend was sent: the lease is live for a lease from then (a duration)",
	"worker.(*Worker).checkStale":   "how long since each lease was last confirmed, compared with the lease (a duration)",
	"worker.(*slots).startable":     "when a handler started, for how long it has run (a duration)",
	"worker.(*slots).oldestRunning": "how long the longest handler has run, a duration that shrinks the prefetch",
}

// TestWorkerReadsNoWallClock fails if any function of the worker or broker
// package outside wallClockAllowed calls time.Now, time.Since or time.Until.
// Timers (time.NewTimer, time.After) measure durations on the monotonic clock
// and are allowed.
func TestWorkerReadsNoWallClock(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	for _, pkg := range []string{"worker", "broker"} {
		files, err := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", pkg, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				name := pkg + "." + funcName(fn)
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") {
						if _, ok := wallClockAllowed[name]; !ok {
							t.Errorf("%s: %s reads the wall clock (time.%s); due-ness and leases must use the server's clock", fset.Position(sel.Pos()), name, sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	star := ""
	if s, ok := recv.(*ast.StarExpr); ok {
		recv, star = s.X, "*"
	}
	if id, ok := recv.(*ast.Ident); ok {
		return "(" + star + id.Name + ")." + fn.Name.Name
	}
	return fn.Name.Name
}

// TestDueTimeComesFromTheServer: jobs start by the server's clock, never
// before their ready time by it; the ready time is the server's TIME at
// enqueue plus the delay; and only a broker whose scripts were handed a
// skewed clock claims a job early.
func TestDueTimeComesFromTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	typ := job.New[crashArgs]("clock")
	var mu sync.Mutex
	var msgs []*job.Message
	reg := job.NewRegistry()
	typ.Handle(reg, func(ctx context.Context, j *job.Job[crashArgs]) error {
		mu.Lock()
		msgs = append(msgs, j.Message)
		mu.Unlock()
		return nil
	})
	for range 2 {
		runWorker(t, worker.Options{Broker: b, Registry: reg, Lease: 5 * time.Second, MaxIdle: 200 * time.Millisecond})
	}

	// A job 2 minutes out: the real workers leave it alone, a broker whose
	// scripts see a clock 5 minutes fast claims it at once.
	far, err := typ.Enqueue(ctx, b, crashArgs{}, job.ID("far"), job.In(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fast, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(fast, func() time.Time { return time.Now().Add(5 * time.Minute) })

	before, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var envs []*job.Envelope
	for i := range 20 {
		e, err := typ.Enqueue(ctx, b, crashArgs{N: i}, job.In(time.Duration(200+20*i)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	after, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "20 jobs handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(msgs) == 20
	})
	for i, e := range envs {
		d := time.Duration(200+20*i) * time.Millisecond
		// Whole ms, rounded up.
		if e.ReadyAt.Before(before.Add(d).Truncate(time.Millisecond)) || e.ReadyAt.After(after.Add(d).Add(time.Millisecond)) {
			t.Errorf("job %d: ReadyAt %v is not the server's TIME at enqueue (%v..%v) + %v", i, e.ReadyAt, before, after, d)
		}
	}
	var worst time.Duration
	for _, m := range msgs {
		if m.ClaimedAt.Before(m.ReadyAt) {
			t.Errorf("job %s claimed at %v, before its ready time %v by the server's clock", m.ID, m.ClaimedAt, m.ReadyAt)
		}
		worst = max(worst, m.Lateness())
	}
	if worst > 2*time.Second {
		t.Errorf("a job started %v after its ready time", worst)
	}

	res, err := testkit.Drive(fast).Claim(ctx, naming.DefaultQueue, 10, time.Minute)
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != far.ID {
		t.Fatalf("claim with a clock 5 minutes fast = %+v, %v; want the 2-minute job, early", res.Jobs, err)
	}
	if err := testkit.Drive(fast).Ack(ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	summary(t, "jobs", 21, "started before their ready time by the server's clock", 0, "worst lateness", worst,
		"2-minute job claimed early", "only by the broker handed a clock 5 minutes fast")
}
