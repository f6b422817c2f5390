package faulttest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/deadletter"
	dqadmin "github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
	"github.com/delayq/delayq/worker"
)

// fnArgs are the arguments of the jobs of TestFunctionsACLUser.
type fnArgs struct {
	N int `json:"n"`
}

// TestFunctionsACLUser: an administrator loads the function library; a
// Redis user with admin.FunctionsACLRules (FCALL and FCALL_RO, no EVAL,
// EVALSHA, SCRIPT or FUNCTION) then runs a worker, a producer, the CLI
// binary and the dashboard through every feature: enqueue, claim, retry,
// dead letters (list, get, redrive, delete, purge, trim), cancel (waiting
// and running), reschedule, batches with callbacks, chains within and
// across slots, a periodic schedule, uniqueness, progress and results,
// pause and resume of a queue and of a type, rate limits, concurrency caps
// and a sharded queue. Redis refuses it nothing (its ACL LOG stays empty),
// no script is sent (no EVAL or EVALSHA call in the server's statistics),
// and the user cannot run a script of its own: EVAL of a busy loop,
// EVALSHA, SCRIPT, FUNCTION LOAD, DELETE and FLUSH are refused with
// NOPERM, and the server keeps answering everyone.
func TestFunctionsACLUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	lib, err := opsOn(t, admin).LoadFunctions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const ns, user = "tenant-f", "delayq-f"
	rdb := aclClient(t, srv, user, dqadmin.FunctionsACLRules(ns))
	if err := admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(rdb, broker.Options{Namespace: ns, Functions: true})
	if err != nil {
		t.Fatal(err)
	}

	coreFlow(t, b) // enqueue, handle, retry, dead letters, cancel, reschedule, stats, queues
	trimFlow(t, rdb, broker.Options{Namespace: ns, Functions: true})
	functionsFeatures(t, b)
	cli := buildDelayq(t)
	functionsCLI(t, cli, srv, user, ns, lib)
	functionsDashboard(t, b)

	// Nothing was refused but the worker's look at maxmemory-policy
	// (CONFIG GET), which it makes to warn about eviction and does
	// without when refused: CONFIG GET would show the server's settings;
	// and, on servers that have it (Redis 7.2, Valkey), go-redis's CLIENT
	// SETINFO on each new connection, which it sends and does without
	// (docs/security.md).
	entries, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if m, ok := e.(map[any]any); !ok || (m["object"] != "config|get" && m["object"] != "client|setinfo") {
			t.Errorf("Redis refused the user a command: %v", e)
		}
	}
	stats := admin.Info(ctx, "commandstats").Val()
	for _, cmd := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "script"} {
		if m := regexp.MustCompile(`cmdstat_` + cmd + `(?:\|\w+)?:calls=(\d+)`).FindStringSubmatch(stats); m != nil && m[1] != "0" {
			t.Errorf("%s was called %s times", cmd, m[1])
		}
	}
	for _, cmd := range []string{"fcall", "fcall_ro"} {
		if !strings.Contains(stats, "cmdstat_"+cmd+":calls=") {
			t.Errorf("no %s call in the server's statistics", cmd)
		}
	}

	// The user cannot run code of its own; the server stays responsive.
	own := "#!lua name=mine\nredis.register_function('spin', function() while true do end end)"
	for what, err := range map[string]error{
		"EVAL of a busy loop": rdb.Eval(ctx, "while true do end", nil).Err(),
		"EVAL_RO":             rdb.EvalRO(ctx, "return 1", nil).Err(),
		"EVALSHA":             rdb.EvalSha(ctx, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", nil).Err(),
		"SCRIPT LOAD":         rdb.ScriptLoad(ctx, "return 1").Err(),
		"SCRIPT FLUSH":        rdb.ScriptFlush(ctx).Err(),
		"SCRIPT KILL":         rdb.ScriptKill(ctx).Err(),
		"FUNCTION LOAD":       rdb.FunctionLoad(ctx, own).Err(),
		"FUNCTION DELETE":     rdb.FunctionDelete(ctx, lib).Err(),
		"FUNCTION FLUSH":      rdb.FunctionFlush(ctx).Err(),
		"FUNCTION KILL":       rdb.FunctionKill(ctx).Err(),
		"LoadFunctions":       func() error { _, err := opsOn(t, rdb).LoadFunctions(ctx); return err }(),
		"delayq admin load-functions": func() error {
			out, err := exec.Command(cli, "admin", "load-functions", "--redis-url", "redis://"+user+":s3cret@"+srv.Addr()+"/0").CombinedOutput()
			if err == nil {
				return nil
			}
			return errors.New(string(out))
		}(),
	} {
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s as the namespace's user: %v, want NOPERM", what, err)
		}
	}
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatalf("the server does not answer the administrator: %v", err)
	}
	if libs, _, err := opsOn(t, admin).FunctionLibraries(ctx); err != nil || len(libs) != 1 || libs[0].Name != lib {
		t.Fatalf("libraries after the user's attempts: %+v, %v", libs, err)
	}
}

// functionsFeatures runs the scheduling features through b with one
// worker: batches, chains, a periodic schedule, uniqueness, progress and
// results, cancelling a running job, pauses, a rate limit, a cap and a
// sharded queue.
func functionsFeatures(t *testing.T, b *broker.Broker) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	handled := map[string]int{} // type/N -> handlings
	count := func(typ string, n int) int {
		mu.Lock()
		defer mu.Unlock()
		return handled[fmt.Sprintf("%s/%d", typ, n)]
	}
	reg := job.NewRegistry()
	types := map[string]*job.Type[fnArgs]{}
	for _, typ := range []string{"fn.work", "fn.cb", "fn.next", "fn.tick", "fn.capped"} {
		q := "fa"
		switch typ {
		case "fn.next":
			q = "fb" // another slot than fn.work's
		case "fn.capped":
			q = "fc"
		}
		tt := job.New[fnArgs](typ, job.Queue(q), job.MaxRetries(2))
		types[typ] = tt
		tt.Handle(reg, func(ctx context.Context, j *job.Job[fnArgs]) error {
			mu.Lock()
			handled[fmt.Sprintf("%s/%d", typ, j.Args.N)]++
			mu.Unlock()
			return nil
		})
	}
	progress := job.New[fnArgs]("fn.progress", job.Queue("fa"), job.Retain(time.Hour))
	progress.Handle(reg, func(ctx context.Context, j *job.Job[fnArgs]) error {
		if err := job.ReportProgress(ctx, 0.5, "half"); err != nil {
			return err
		}
		return job.SetResult(ctx, []byte(`{"done":true}`))
	})
	started := make(chan struct{}, 1)
	blocking := job.New[fnArgs]("fn.block", job.Queue("fa"))
	blocking.Handle(reg, func(ctx context.Context, j *job.Job[fnArgs]) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	sharded := job.New[fnArgs]("fn.sharded", job.Queue("fs"))
	sharded.Handle(reg, func(ctx context.Context, j *job.Job[fnArgs]) error {
		mu.Lock()
		handled[fmt.Sprintf("fn.sharded/%d", j.Args.N)]++
		mu.Unlock()
		return nil
	})
	if err := b.DeclareQueue(ctx, "fs", 3); err != nil {
		t.Fatalf("declare a sharded queue: %v", err)
	}
	stop := runWorker(t, worker.Options{Broker: b, Registry: reg, Lease: 5 * time.Second, MaxIdle: 100 * time.Millisecond,
		Queues: []worker.Queue{{Name: "fa"}, {Name: "fb"}, {Name: "fc"}, {Name: "fs"}}})
	defer stop()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	envelope := func(typ string, n int, opts ...job.Option) *job.Envelope {
		t.Helper()
		e, err := types[typ].Envelope(fnArgs{N: n}, opts...)
		must("envelope", err)
		return e
	}

	// A batch with both callbacks.
	_, err := b.CreateBatch(ctx, broker.BatchSpec{ID: "fb1", OnSuccess: envelope("fn.cb", 1), OnComplete: envelope("fn.cb", 2)})
	must("create batch", err)
	must("add to batch", b.AddToBatch(ctx, "fb1", envelope("fn.work", 10), envelope("fn.work", 11), envelope("fn.work", 12)))
	must("seal batch", b.SealBatch(ctx, "fb1"))
	// A chain: a next job in the same slot and one in another.
	_, err = types["fn.work"].Enqueue(ctx, b, fnArgs{N: 20}, job.Then(envelope("fn.work", 21), envelope("fn.next", 22)))
	must("enqueue a chain", err)
	// Uniqueness.
	_, err = types["fn.work"].Enqueue(ctx, b, fnArgs{N: 30}, job.ID("unique-30"), job.Unique(time.Hour))
	must("enqueue unique", err)
	var dup *broker.DuplicateError
	// (Other arguments: an enqueue of the very same envelope would be taken
	// for a resend of the first, and succeed.)
	if _, err := types["fn.work"].Enqueue(ctx, b, fnArgs{N: 31}, job.ID("unique-30"), job.Unique(time.Hour)); !errors.As(err, &dup) {
		t.Fatalf("second unique enqueue: %v, want a DuplicateError", err)
	}
	// Progress and a result, kept.
	_, err = progress.Enqueue(ctx, b, fnArgs{N: 40}, job.ID("progress-40"))
	must("enqueue with a result", err)
	// A sharded queue.
	for n := range 6 {
		_, err := sharded.Enqueue(ctx, b, fnArgs{N: n})
		must("enqueue to a sharded queue", err)
	}
	// A periodic schedule.
	s, err := periodic.New(b, periodic.Options{})
	must("periodic.New", err)
	must("periodic.Add", periodic.Add(s, "fn-tick", "@every 1s", types["fn.tick"], fnArgs{N: 50}))
	pctx, pstop := context.WithCancel(ctx)
	pdone := make(chan error, 1)
	go func() { pdone <- s.Run(pctx) }()

	redistest.WaitFor(t, 30*time.Second, "batch, chain, unique, result, sharded and periodic jobs handled", func() bool {
		st, err := b.Batch(ctx, "fb1")
		if err != nil || !st.SuccessFired || !st.CompleteFired || count("fn.cb", 1) != 1 || count("fn.cb", 2) != 1 {
			return false
		}
		for _, n := range []int{20, 21, 30} {
			if count("fn.work", n) != 1 {
				return false
			}
		}
		for n := range 6 {
			if count("fn.sharded", n) != 1 {
				return false
			}
		}
		j, err := b.Job(ctx, "fa", "progress-40")
		return err == nil && j.State == job.StateSucceeded && string(j.Result) == `{"done":true}` && j.Progress != nil &&
			count("fn.next", 22) == 1 && count("fn.tick", 50) >= 1
	})
	pstop()
	must("periodic run", <-pdone)
	list, err := periodic.List(ctx, b, time.Time{})
	if err != nil || len(list) != 1 || list[0].Last.IsZero() {
		t.Fatalf("periodic.List: %+v, %v", list, err)
	}
	if _, err := b.Batches(ctx, "", 10); err != nil {
		t.Fatalf("list batches: %v", err)
	}

	// Cancel a running job: its handler's context ends, and it is dead as
	// cancelled.
	_, err = blocking.Enqueue(ctx, b, fnArgs{N: 60}, job.ID("running-60"))
	must("enqueue a job to cancel while it runs", err)
	<-started
	_, err = b.Cancel(ctx, "fa", "running-60")
	must("cancel a running job", err)
	redistest.WaitFor(t, 30*time.Second, "the running job cancelled", func() bool {
		rec, err := deadletter.New(b).Get(ctx, "fa", "running-60")
		return err == nil && rec.Reason == broker.ReasonCancelled
	})

	// Pause a queue, then a type; a rate limit and a cap while jobs run.
	must("pause", b.Pause(ctx, "fc", ""))
	must("pause a type", b.Pause(ctx, "fc", "fn.capped"))
	must("rate limit", b.SetRateLimit(ctx, "fc", "", job.RateLimit{Count: 100, Per: time.Second, Burst: 10}))
	must("type rate limit", b.SetRateLimit(ctx, "fc", "fn.capped", job.RateLimit{Count: 50, Per: time.Second}))
	must("cap", b.SetConcurrency(ctx, "fc", "", 2))
	must("type cap", b.SetConcurrency(ctx, "fc", "fn.capped", 1))
	for n := range 3 {
		_, err := types["fn.capped"].Enqueue(ctx, b, fnArgs{N: 70 + n})
		must("enqueue to the paused queue", err)
	}
	st, err := testkit.OneStats(b.Stats(ctx, "fc"))
	if err != nil || !st.Paused || len(st.PausedTypes) != 1 || st.Caps[""] != 2 || st.RateLimits["fn.capped"].Count != 50 {
		t.Fatalf("stats of the controlled queue: %+v, %v", st, err)
	}
	_, err = b.Resume(ctx, "fc", "")
	must("resume", err)
	_, err = b.Resume(ctx, "fc", "fn.capped")
	must("resume a type", err)
	redistest.WaitFor(t, 30*time.Second, "the capped, limited jobs handled", func() bool {
		return count("fn.capped", 70) == 1 && count("fn.capped", 71) == 1 && count("fn.capped", 72) == 1
	})
	must("clear the cap", b.SetConcurrency(ctx, "fc", "", 0))
	must("clear the rate limit", b.SetRateLimit(ctx, "fc", "", job.RateLimit{}))
	if _, err := protocol.Admin(b).History(ctx, []string{"fa", "fc"}, time.Now().Add(-time.Hour), time.Now()); err != nil {
		t.Fatalf("history: %v", err)
	}
}

// buildDelayq builds the delayq command into the test's directory.
func buildDelayq(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "delayq")
	if b, err := exec.Command(goBin, "build", "-o", out, "github.com/delayq/delayq/cmd/delayq").CombinedOutput(); err != nil {
		t.Fatalf("go build delayq: %v\n%s", err, b)
	}
	return out
}

// functionsCLI runs the delayq binary as user (with $DELAYQ_FUNCTIONS=1)
// through its commands that read and change jobs, and the admin commands
// as the default user.
func functionsCLI(t *testing.T, bin string, srv *redistest.Server, user, ns, lib string) {
	t.Helper()
	run := func(url string, wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "REDIS_URL="+url, "DELAYQ_NAMESPACE="+ns, "DELAYQ_FUNCTIONS=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, strings.NewReader("")
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("delayq %q: %v", args, err)
		}
		if code != wantCode {
			t.Fatalf("delayq %q as %s: exit %d, want %d; stdout %q, stderr %q", args, url[:strings.IndexByte(url, '@')+1], code, wantCode, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	asUser := "redis://" + user + ":s3cret@" + srv.Addr() + "/0"
	asAdmin := "redis://" + srv.Addr() + "/0"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--type", "cli.t", "--payload", `{"n":1}`, "--queue", "cq", "--in", "1h", "--id", "c1"}, "c1"},
		{[]string{"enqueue", "--type", "cli.t", "--payload", `{"n":2}`, "--queue", "cq", "--in", "1h", "--id", "c2"}, "c2"},
		{[]string{"stats"}, "cq"},
		{[]string{"stats", "--json"}, `"queue":"cq"`},
		{[]string{"queues", "ls"}, "cq"},
		{[]string{"jobs", "ls", "--queue", "cq"}, "c1"},
		{[]string{"jobs", "show", "c1", "--queue", "cq"}, "cli.t"},
		{[]string{"jobs", "reschedule", "c1", "--queue", "cq", "--in", "2h"}, "c1"},
		{[]string{"jobs", "cancel", "c2", "--queue", "cq"}, "c2"},
		{[]string{"queues", "pause", "cq"}, "cq"},
		{[]string{"queues", "resume", "cq"}, "cq"},
		{[]string{"queues", "cap", "cq", "3"}, "cq"},
		{[]string{"queues", "cap", "cq", "0"}, "cq"},
		{[]string{"queues", "limit", "cq", "10/1s"}, "cq"},
		{[]string{"queues", "limit", "cq", "--clear"}, "cq"},
		{[]string{"enqueue", "--type", "cli.t", "--payload", `{"n":3}`, "--queue", "gone", "--in", "1h", "--id", "g1"}, "g1"},
		{[]string{"jobs", "cancel", "g1", "--queue", "gone"}, "g1"},
		{[]string{"queues", "forget", "gone"}, "gone"},
		{[]string{"workers", "ls"}, ""},
		{[]string{"dead", "ls"}, "running-60"},
		{[]string{"dead", "ls", "--queue", "fa", "--json"}, "running-60"},
		{[]string{"dead", "show", "running-60", "--queue", "fa"}, "cancelled"},
		{[]string{"dead", "redrive", "running-60", "--queue", "fa"}, "running-60"},
		{[]string{"dead", "trim", "--queue", "fa"}, ""},
		{[]string{"dead", "purge", "--queue", "fa", "--yes"}, ""},
		{[]string{"periodic", "ls"}, "fn-tick"},
		{[]string{"batches", "ls"}, "fb1"},
		{[]string{"batches", "show", "fb1"}, "fb1"},
	} {
		if out := run(asUser, 0, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("delayq %q: output lacks %q:\n%s", c.args, c.want, out)
		}
	}
	// The library is the administrator's to load and list.
	if out := run(asAdmin, 0, "admin", "load-functions"); !strings.Contains(out, "loaded "+lib) {
		t.Errorf("admin load-functions: %s", out)
	}
	if out := run(asAdmin, 0, "admin", "functions"); !regexp.MustCompile(lib + `\s+1 of 1\s+yes`).MatchString(out) {
		t.Errorf("admin functions: %s", out)
	}
}

// csrfField finds the CSRF token in a dashboard page's forms.
var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// functionsDashboard serves the dashboard over b and opens every page and
// posts every action of it.
func functionsDashboard(t *testing.T, b *broker.Broker) {
	t.Helper()
	ctx := context.Background()
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Transport: &http.Transport{}, Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(client.CloseIdleConnections)
	do := func(method, path string, form url.Values, want int) string {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d:\n%.2000s", method, path, res.StatusCode, want, b)
		}
		return string(b)
	}
	post := func(path string, form url.Values) {
		t.Helper()
		m := csrfField.FindStringSubmatch(do(http.MethodGet, "/dead", nil, http.StatusOK))
		if m == nil {
			t.Fatal("no CSRF token on the dead-letter page")
		}
		form.Set("csrf", m[1])
		form.Set("confirmed", "yes")
		do(http.MethodPost, path, form, http.StatusSeeOther)
	}
	typ := job.New[fnArgs]("dash.t", job.Queue("dq"))
	for _, id := range []string{"d1", "d2", "d3"} {
		if _, err := typ.Enqueue(ctx, b, fnArgs{}, job.ID(id), job.In(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/", "/queues/dq", "/queues/dq/job?id=d1", "/queues/fa/job?id=progress-40", "/dead",
		"/periodic", "/batches", "/batches/fb1"} {
		do(http.MethodGet, p, nil, http.StatusOK)
	}
	post("/queues/dq/reschedule", url.Values{"id": {"d1"}, "in": {"2h"}})
	post("/queues/dq/cancel", url.Values{"id": {"d2"}})
	post("/queues/dq/pause", url.Values{})
	post("/queues/dq/resume", url.Values{})
	// Dead letters: redrive one, delete one, redrive the rest, purge.
	kill := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := typ.Enqueue(ctx, b, fnArgs{}, job.ID(id), job.Queue("dq2")); err != nil {
				t.Fatal(err)
			}
		}
		res, err := testkit.Drive(b).Claim(ctx, "dq2", len(ids), time.Minute)
		if err != nil || len(res.Jobs) != len(ids) {
			t.Fatalf("claimed %d of %d: %v", len(res.Jobs), len(ids), err)
		}
		for _, c := range res.Jobs {
			if _, err := testkit.Drive(b).Kill(ctx, c.Lease, &job.DeadRecord{Type: "dash.t", Body: c.Body, Error: "boom", Attempts: c.Attempt}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kill("x1", "x2", "x3", "x4")
	do(http.MethodGet, "/dead?queue=dq2", nil, http.StatusOK)
	do(http.MethodGet, "/dead/dq2/job?id=x1", nil, http.StatusOK)
	post("/dead/dq2/redrive", url.Values{"id": {"x1"}})
	post("/dead/dq2/delete", url.Values{"id": {"x2"}})
	post("/dead/redrive-all", url.Values{"queue": {"dq2"}})
	kill("x5")
	post("/dead/dq2/purge", url.Values{})
	if st, err := testkit.OneStats(b.Stats(ctx, "dq2")); err != nil || st.Dead != 0 || st.Scheduled != 3 {
		t.Fatalf("after the dashboard's dead-letter actions: %+v, %v, want 3 scheduled (x1, x3, x4) and none dead", st, err)
	}
}

// opsOn returns the operator's side of a broker on rdb.
func opsOn(t *testing.T, rdb redis.UniversalClient) dqadmin.Broker {
	t.Helper()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.Admin(b)
}
