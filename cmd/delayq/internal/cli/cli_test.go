package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/cmd/delayq/internal/cli"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/worker"
)

// bin is the delayq binary built once for this test binary.
var bin string

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	dir, err := os.MkdirTemp("", "delayq-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "delayq")
	build := exec.Command("go", "build", "-o", bin, "github.com/delayq/delayq/cmd/delayq")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build delayq: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	redistest.MainCleanup(m, func() { _ = os.RemoveAll(dir) })
}

type testBundle struct {
	t   testing.TB
	ctx context.Context
	url string
	ns  string
	rdb redis.UniversalClient
	b   *broker.Broker
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{t: t, ctx: context.Background(), url: cli.TopologyURL(t, ""), ns: ns, rdb: rdb, b: b}
}

func (tb *testBundle) key(queue, name string) string { return testkit.Key(tb.t, tb.b, queue, name) }

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// run runs delayq with args on the bundle's server and namespace.
func (tb *testBundle) run(t *testing.T, args ...string) result {
	t.Helper()
	return tb.runIn(t, "", args...)
}

// runIn is run with stdin.
func (tb *testBundle) runIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runBinary(t, []string{"REDIS_URL=" + tb.url}, stdin, append(args, "--namespace", tb.ns)...)
}

func runBinary(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run delayq %q: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// ok runs delayq and fails the test unless it succeeds.
func (tb *testBundle) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := tb.run(t, args...)
	if r.code != 0 {
		t.Fatalf("delayq %q: exit %d, stderr %q", args, r.code, r.stderr)
	}
	return r.stdout
}

// okJSON runs delayq --json and decodes its output into v.
func (tb *testBundle) okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := tb.ok(t, append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("delayq %q: output is not JSON: %v\n%s", args, err, out)
	}
}

type statsOut struct {
	Queues []struct {
		Queue      string `json:"queue"`
		Scheduled  int64  `json:"scheduled"`
		Due        int64  `json:"due"`
		Processing int64  `json:"processing"`
		Dead       int64  `json:"dead"`
	} `json:"queues"`
}

// checkStats runs "stats --json" and compares each queue's counts with the
// sets in Redis, read by the test itself.
func (tb *testBundle) checkStats(t *testing.T, queue string, scheduled, processing, dead int64) {
	t.Helper()
	var s statsOut
	tb.okJSON(t, &s, "stats")
	for _, q := range s.Queues {
		if q.Queue != queue {
			continue
		}
		inRedis := [3]int64{
			tb.rdb.ZCard(tb.ctx, tb.key(queue, "scheduled")).Val(),
			tb.rdb.ZCard(tb.ctx, tb.key(queue, "processing")).Val(),
			tb.rdb.HLen(tb.ctx, tb.key(queue, "dead")).Val(),
		}
		got := [3]int64{q.Scheduled, q.Processing, q.Dead}
		if want := [3]int64{scheduled, processing, dead}; got != want || inRedis != want {
			t.Fatalf("queue %s: stats says scheduled/processing/dead %v, Redis holds %v, want %v", queue, got, inRedis, want)
		}
		return
	}
	t.Fatalf("stats does not list queue %s: %+v", queue, s)
}

// killMany enqueues jobs of the given types in queue and dead-letters them
// directly through the broker; job i has type types[i%len(types)].
func (tb *testBundle) killMany(t *testing.T, queue string, n int, types ...string) map[string][]string {
	t.Helper()
	envs := make([]*job.Envelope, n)
	for i := range envs {
		envs[i] = &job.Envelope{ID: fmt.Sprintf("job-%04d", i), Queue: queue, Type: types[i%len(types)],
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if err := tb.b.Enqueue(tb.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	byType := map[string][]string{}
	for claimed := 0; claimed < n; {
		res, err := testkit.Drive(tb.b).Claim(tb.ctx, queue, 500, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Jobs {
			rec := &job.DeadRecord{Type: c.Envelope.Type, Body: c.Body, Error: "permanent: " + c.Envelope.Type + " refused", Attempts: 1}
			if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, rec); err != nil {
				t.Fatal(err)
			}
			byType[c.Envelope.Type] = append(byType[c.Envelope.Type], c.ID)
		}
		claimed += len(res.Jobs)
	}
	return byType
}

type deadLsOut struct {
	Records []struct {
		ID       string          `json:"id"`
		Queue    string          `json:"queue"`
		Type     string          `json:"type"`
		Error    string          `json:"error"`
		Attempts int             `json:"attempts"`
		Payload  json.RawMessage `json:"payload"`
	} `json:"records"`
	Next string `json:"next"`
}

func TestDeadListRedriveAndStats(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const queue = "work"
	byType := tb.killMany(t, queue, 1000, "mail", "sms", "push")
	tb.checkStats(t, queue, 0, 0, 1000)

	// Page through one type: exactly its jobs, without gaps or repeats.
	seen := map[string]int{}
	cursor, pages := "", 0
	for {
		args := []string{"dead", "ls", "--type", "sms", "--limit", "40"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		var page deadLsOut
		tb.okJSON(t, &page, args...)
		pages++
		if len(page.Records) > 40 {
			t.Fatalf("page of %d records, limit 40", len(page.Records))
		}
		for _, r := range page.Records {
			if r.Type != "sms" || r.Queue != queue || !strings.Contains(r.Error, "sms refused") || len(r.Payload) == 0 {
				t.Fatalf("record %+v in a --type sms listing", r)
			}
			seen[r.ID]++
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if len(seen) != len(byType["sms"]) || pages < len(byType["sms"])/40 {
		t.Fatalf("listed %d distinct sms jobs in %d pages, want %d", len(seen), pages, len(byType["sms"]))
	}
	for _, id := range byType["sms"] {
		if seen[id] != 1 {
			t.Fatalf("sms job %s listed %d times", id, seen[id])
		}
	}

	// Redrive that type: a filter-wide run, confirmed by --yes.
	var redriven struct {
		Redriven int `json:"redriven"`
		Failed   int `json:"failed"`
	}
	tb.okJSON(t, &redriven, "dead", "redrive", "--type", "sms", "--yes", "--batch", "50")
	nsms := int64(len(byType["sms"]))
	if redriven.Redriven != int(nsms) || redriven.Failed != 0 {
		t.Fatalf("redrive: %+v, want %d redriven", redriven, nsms)
	}
	tb.checkStats(t, queue, nsms, 0, 1000-nsms)

	// A worker now handles them: attempts were reset, so the one try they
	// have (MaxRetries 0) is theirs.
	reg := job.NewRegistry()
	var handled atomic.Int64
	job.New[map[string]int]("sms").Handle(reg, func(ctx context.Context, j *job.Job[map[string]int]) error {
		if j.Attempt != 1 {
			return fmt.Errorf("attempt %d, want 1", j.Attempt)
		}
		handled.Add(1)
		return nil
	})
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	w, err := worker.New(worker.Options{Broker: tb.b, Registry: reg, Queues: []worker.Queue{{Name: queue}}, Concurrency: 20, Logger: &logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(tb.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	redistest.WaitFor(t, 30*time.Second, "worker handles the redriven jobs", func() bool {
		return handled.Load() == nsms && tb.rdb.ZCard(tb.ctx, tb.key(queue, "processing")).Val() == 0
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tb.checkStats(t, queue, 0, 0, 1000-nsms)
	var rest deadLsOut
	tb.okJSON(t, &rest, "dead", "ls", "--type", "sms")
	if len(rest.Records) != 0 {
		t.Fatalf("sms jobs still dead after the redrive: %d", len(rest.Records))
	}
	var mail deadLsOut
	tb.okJSON(t, &mail, "dead", "ls", "--type", "mail", "--limit", "1000")
	if len(mail.Records) != len(byType["mail"]) {
		t.Fatalf("mail jobs dead: %d, want %d untouched", len(mail.Records), len(byType["mail"]))
	}
}

func TestDeadRedriveConfirmation(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.killMany(t, "q", 10, "a", "b")

	// No --yes and no answer on stdin: refused, nothing moves.
	r := tb.run(t, "dead", "redrive", "--type", "a")
	if r.code != 1 || !strings.Contains(r.stderr, "aborted") || !strings.Contains(r.stderr, "Redrive 5 dead job(s) of type a") {
		t.Fatalf("unconfirmed redrive: %+v", r)
	}
	tb.checkStats(t, "q", 0, 0, 10)
	r = tb.runIn(t, "n\n", "dead", "purge")
	if r.code != 1 || !strings.Contains(r.stderr, "aborted") {
		t.Fatalf("declined purge: %+v", r)
	}
	tb.checkStats(t, "q", 0, 0, 10)

	// Answered yes on stdin.
	r = tb.runIn(t, "y\n", "dead", "redrive", "--type", "a", "--queue", "q", "--in", "1h")
	if r.code != 0 || !strings.Contains(r.stdout, "redriven 5 dead job(s)") {
		t.Fatalf("confirmed redrive: %+v", r)
	}
	tb.checkStats(t, "q", 5, 0, 5)
	var due int64
	due, _ = tb.rdb.ZCount(tb.ctx, tb.key("q", "scheduled"), "-inf", fmt.Sprint(time.Now().Add(50*time.Minute).UnixMilli())).Result()
	if due != 0 {
		t.Fatalf("%d jobs redriven with --in 1h are due within 50 minutes", due)
	}

	// By id: one that is not dead any more, one pending again, one dead.
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "job-0001", Queue: "q", Type: "b", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	r = tb.run(t, "dead", "redrive", "--queue", "q", "job-0000", "job-0001", "job-0003")
	if r.code != 1 || !strings.Contains(r.stdout, "redrove job-0003") ||
		!strings.Contains(r.stderr, "2 of 3 failed") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("redrive by id: %+v", r)
	}
	var res []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	}
	rj := tb.run(t, "dead", "redrive", "--queue", "q", "job-0000", "job-0001", "--json")
	if err := json.Unmarshal([]byte(rj.stdout), &res); err != nil || len(res) != 2 ||
		!strings.Contains(res[0].Error, "not found") || !strings.Contains(res[1].Error, "already pending") {
		t.Fatalf("redrive by id, JSON: %+v (%v)", rj, err)
	}
	// job-0001's dead record was kept.
	tb.ok(t, "dead", "show", "job-0001", "--queue", "q")

	// rm by id, then purge with --yes.
	tb.ok(t, "dead", "rm", "--queue", "q", "job-0001")
	if out := tb.ok(t, "dead", "purge", "--yes"); !strings.Contains(out, "purged 3 dead job(s) across all queues") {
		t.Fatalf("purge: %q", out)
	}
	tb.checkStats(t, "q", 7, 0, 0)
}

func TestDeadTrimRetention(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	byType := tb.killMany(t, "q", 150, "t")
	if out := tb.ok(t, "dead", "trim", "--cap", "100"); !strings.Contains(out, "dropped 50 dead job(s)") {
		t.Fatalf("trim: %q", out)
	}
	var page deadLsOut
	tb.okJSON(t, &page, "dead", "ls", "--limit", "1000")
	kept := map[string]bool{}
	for _, r := range page.Records {
		kept[r.ID] = true
	}
	// The newest 100 are kept: the jobs died in claim order.
	ids := byType["t"]
	for i, id := range ids {
		if kept[id] != (i >= 50) {
			t.Fatalf("job %s (death %d of 150) kept: %v", id, i+1, kept[id])
		}
	}
	if out := tb.ok(t, "dead", "trim", "--max-age", "1ms", "--queue", "q"); !strings.Contains(out, "dropped 100") {
		t.Fatalf("trim by age: %q", out)
	}
	tb.checkStats(t, "q", 0, 0, 0)
}

func TestEnqueueCancelNeverRuns(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var enq struct {
		ID      string `json:"id"`
		ReadyAt string `json:"ready_at"`
	}
	tb.okJSON(t, &enq, "enqueue", "--queue", "q", "--type", "greet", "--payload", `{"name":"ann"}`, "--in", "1s", "--max-retries", "2")
	if enq.ID == "" {
		t.Fatal("enqueue printed no id")
	}
	// A witness job, due just after the cancelled one: once it has run,
	// the worker has claimed past the cancelled job's ready time.
	tb.ok(t, "enqueue", "--queue", "q", "--type", "greet", "--payload", `{"name":"witness"}`, "--in", "1200ms", "--id", "witness")
	var show struct {
		State      string          `json:"state"`
		Payload    json.RawMessage `json:"payload"`
		MaxRetries int             `json:"max_retries"`
	}
	tb.okJSON(t, &show, "jobs", "show", enq.ID, "--queue", "q")
	if show.State != "scheduled" || string(show.Payload) != `{"name":"ann"}` || show.MaxRetries != 2 {
		t.Fatalf("jobs show: %+v", show)
	}
	if out := tb.ok(t, "jobs", "cancel", enq.ID, "--queue", "q"); !strings.Contains(out, "cancelled "+enq.ID) {
		t.Fatalf("cancel: %q", out)
	}
	if r := tb.run(t, "jobs", "cancel", enq.ID, "--queue", "q"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("second cancel: %+v", r)
	}

	reg := job.NewRegistry()
	ran := make(chan string, 10)
	job.New[map[string]string]("greet").Handle(reg, func(ctx context.Context, j *job.Job[map[string]string]) error {
		ran <- j.Args["name"]
		return nil
	})
	w, err := worker.New(worker.Options{Broker: tb.b, Registry: reg, Queues: []worker.Queue{{Name: "q"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(tb.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case name := <-ran:
		if name != "witness" {
			t.Fatalf("the cancelled job ran (%s)", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the witness job did not run")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(ran) != 0 {
		t.Fatalf("the cancelled job ran (%s)", <-ran)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	secret := redistest.Start(t, "--requirepass", "secret")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string // in the one line of stderr
	}{
		{"unknown flag", nil, []string{"enqueue", "--type", "t", "--payload", "{}", "--colour", "red"}, 2, "unknown flag: --colour"},
		{"unknown command", nil, []string{"dead", "resurrect"}, 2, `unknown command "resurrect"`},
		{"malformed payload", nil, []string{"enqueue", "--type", "t", "--payload", `{"a":`}, 2, "invalid --payload: not JSON"},
		{"bad duration", nil, []string{"enqueue", "--type", "t", "--payload", "{}", "--in", "ten seconds"}, 2, `invalid --in "ten seconds"`},
		{"negative duration", nil, []string{"enqueue", "--type", "t", "--payload", "{}", "--in", "-1s"}, 2, `invalid --in "-1s"`},
		{"bad time", nil, []string{"enqueue", "--type", "t", "--payload", "{}", "--at", "tomorrow"}, 2, `invalid --at "tomorrow"`},
		{"bad type", nil, []string{"enqueue", "--type", "a type", "--payload", "{}"}, 2, "invalid --type"},
		{"bad queue", nil, []string{"enqueue", "--type", "t", "--payload", "{}", "--queue", "q{1}"}, 2, "invalid --queue"},
		{"missing type", nil, []string{"enqueue", "--payload", "{}"}, 2, `required flag(s) "type" not set`},
		{"in and at", nil, []string{"enqueue", "--type", "t", "--payload", "{}", "--in", "1s", "--at", "2030-01-01T00:00:00Z"}, 2, "at most one of --in and --at"},
		{"bad limit", nil, []string{"dead", "ls", "--limit", "0"}, 2, "invalid --limit 0"},
		{"bad cursor", nil, []string{"dead", "ls", "--cursor", "zzz"}, 2, "invalid --cursor"},
		{"redrive without target", nil, []string{"dead", "redrive"}, 2, "give job ids, filters"},
		{"bad since", nil, []string{"dead", "ls", "--since", "last week"}, 2, `invalid --since "last week"`},
		{"extra argument", nil, []string{"stats", "now"}, 2, `unexpected argument "now"`},
		{"bad url", []string{"REDIS_URL=http://127.0.0.1:1"}, []string{"stats"}, 2, "invalid --redis-url"},
		{"unreachable", []string{"REDIS_URL=redis://127.0.0.1:1/0"}, []string{"enqueue", "--type", "t", "--payload", "{}"}, 1, "cannot connect to Redis at 127.0.0.1:1"},
		{"wrong password", []string{"REDIS_URL=redis://:wrong@" + secret.Addr() + "/0"}, []string{"stats"}, 1, "WRONGPASS"},
		{"no password", []string{"REDIS_URL=redis://" + secret.Addr() + "/0"}, []string{"enqueue", "--type", "t", "--payload", "{}"}, 1, "NOAUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"REDIS_URL=" + tb.url}, tc.env...)
			r := runBinary(t, env, "", append(tc.args, "--namespace", tb.ns)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 ||
				!strings.HasPrefix(r.stderr, "delayq: ") || r.stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit %d and one line with %q", r.code, r.stderr, r.stdout, tc.code, tc.want)
			}
		})
	}
	if keys, _ := tb.rdb.Keys(tb.ctx, tb.ns+":*").Result(); len(keys) != 0 {
		t.Fatalf("bad input wrote keys %v", keys)
	}
	rdb := redis.NewClient(&redis.Options{Addr: secret.Addr(), Password: "secret"})
	defer rdb.Close()
	if n, err := rdb.DBSize(tb.ctx).Result(); err != nil || n != 0 {
		t.Fatalf("the password-protected server holds %d keys (%v)", n, err)
	}

	// The right password works.
	r := runBinary(t, []string{"REDIS_URL=redis://:secret@" + secret.Addr() + "/0"}, "", "stats", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"queues":[]`) {
		t.Fatalf("stats with the password: %+v", r)
	}
}

func TestEnqueueDuplicateAndStdin(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := tb.runIn(t, `{"big": [1, 2, 3]}`, "enqueue", "--type", "t", "--payload", "-", "--id", "order-42", "--in", "1h")
	if r.code != 0 || !strings.Contains(r.stdout, "enqueued order-42 in queue default") {
		t.Fatalf("enqueue from stdin: %+v", r)
	}
	r = tb.run(t, "enqueue", "--type", "t", "--payload", `{"other":1}`, "--id", "order-42")
	if r.code != 1 || !strings.Contains(r.stderr, `job id "order-42" is already pending`) {
		t.Fatalf("duplicate: %+v", r)
	}
	body := tb.rdb.HGet(tb.ctx, tb.key("default", "jobs"), "order-42").Val()
	if !strings.Contains(body, `"big"`) {
		t.Fatalf("the pending job changed: %s", body)
	}
	// Reschedule it to now, then list it as due.
	tb.ok(t, "jobs", "reschedule", "order-42", "--in", "0s")
	var ls struct {
		Jobs []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"jobs"`
	}
	tb.okJSON(t, &ls, "jobs", "ls")
	if len(ls.Jobs) != 1 || ls.Jobs[0].ID != "order-42" {
		t.Fatalf("jobs ls: %+v", ls)
	}
	var s statsOut
	tb.okJSON(t, &s, "stats")
	if len(s.Queues) != 1 || s.Queues[0].Due != 1 {
		t.Fatalf("stats after reschedule: %+v", s)
	}
}

func TestJobsLsPaging(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	envs := make([]*job.Envelope, 25)
	for i := range envs {
		envs[i] = &job.Envelope{ID: fmt.Sprintf("j%02d", i), Queue: "q", Type: "t", Delay: time.Duration(i%5) * time.Hour}
	}
	if err := tb.b.Enqueue(tb.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.Reschedule(tb.ctx, "q", "j07", time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", 3, time.Minute) // j07 and the two others due now
	if err != nil || len(res.Jobs) != 3 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	type page struct {
		Jobs []struct {
			ID               string `json:"id"`
			State            string `json:"state"`
			LeaseRemainingMS *int64 `json:"lease_remaining_ms"`
		} `json:"jobs"`
		Next string `json:"next"`
	}
	var states []string
	seen := map[string]int{}
	cursor := ""
	for range 20 {
		args := []string{"jobs", "ls", "--queue", "q", "--limit", "4"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		var p page
		tb.okJSON(t, &p, args...)
		for _, j := range p.Jobs {
			seen[j.ID]++
			states = append(states, j.State)
			if (j.State == "processing") != (j.LeaseRemainingMS != nil) {
				t.Fatalf("job %+v", j)
			}
		}
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if len(seen) != 25 || len(states) != 25 {
		t.Fatalf("listed %d jobs (%d distinct), want 25: %v", len(states), len(seen), seen)
	}
	for i, st := range states {
		if want := map[bool]string{true: "processing", false: "scheduled"}[i < 3]; st != want {
			t.Fatalf("job %d listed as %s, want processing jobs first: %v", i, st, states)
		}
	}
	// A processing job is cancelled too: the line says it was running, and
	// its worker's next heartbeat is refused with ErrCancelled.
	if out := tb.ok(t, "jobs", "cancel", res.Jobs[0].ID, "--queue", "q"); out != "cancelled "+res.Jobs[0].ID+": it was running; its worker was told to stop\n" {
		t.Fatalf("cancel of a processing job: %q", out)
	}
	if err := testkit.Drive(tb.b).Extend(tb.ctx, time.Minute, res.Jobs[0].Lease); !errors.Is(err, broker.ErrCancelled) {
		t.Fatalf("heartbeat after the cancel: %v, want ErrCancelled", err)
	}
}

func TestStatsWatch(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "stats", "--watch", "--interval", "50ms", "--json", "--namespace", tb.ns)
	cmd.Env = append(os.Environ(), "REDIS_URL="+tb.url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for i := range 3 {
		if !lines.Scan() {
			t.Fatalf("frame %d missing: %v, stderr %q", i, lines.Err(), stderr.String())
		}
		var s statsOut
		if err := json.Unmarshal(lines.Bytes(), &s); err != nil || len(s.Queues) != 1 || s.Queues[0].Scheduled != 1 {
			t.Fatalf("frame %d: %s (%v)", i, lines.Text(), err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("stats --watch after SIGINT: %v, stderr %q", err, stderr.String())
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runBinary(t, []string{"REDIS_URL=redis://127.0.0.1:1/0"}, "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "delayq ") {
		t.Fatalf("version: %+v", r)
	}
}
