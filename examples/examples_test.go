// Package examples_test runs every example as a user would, with no Redis
// (REDIS_URL unset, so each starts its embedded server), and checks what it
// prints.
package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "delayq-examples")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runExample builds ./NAME and runs it with REDIS_URL unset, failing the
// test unless it exits 0 within limit. It returns the combined output.
func runExample(t *testing.T, name string, limit time.Duration) string {
	t.Helper()
	bin := filepath.Join(binDir, name)
	if out, err := exec.Command("go", "build", "-o", bin, "./"+name).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = withoutEnv(os.Environ(), "REDIS_URL")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not exit within %v:\n%s", name, limit, out)
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	t.Logf("%s exited 0 after %v", name, time.Since(start).Round(time.Millisecond))
	return string(out)
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// goEnv returns the go command's effective setting of key (from the
// environment or its configuration file).
func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(out))
}

func expectLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestQuickstart(t *testing.T) {
	t.Parallel()
	out := runExample(t, "quickstart", 15*time.Second)
	expectLines(t, out,
		"using embedded redis",
		"report.build   attempt 1 failed, retrying with backoff",
		"report.build   attempt 3 succeeded",
		"dead letter:   invoice-INV-7 after 2 attempts: account locked",
		"invoice.sync   INV-7 succeeded after redrive (attempt 1)",
		"scheduling order-42's timeout again is refused",
		"order-42 was paid: its timeout job is cancelled",
		`sms.send       to +15550100 "your code is 4711" (lateness `,
		"done: scheduled 0, processing 0, dead 0",
	)
	if strings.Contains(out, "this must not happen") {
		t.Errorf("the cancelled order timeout ran:\n%s", out)
	}
}

// stampRE matches the "[ 1.234s] " stamp the examples print in front of
// every line.
var stampRE = regexp.MustCompile(`^\[\s*(\d+\.\d+)s\] (.*)$`)

// stampedLines returns the seconds stamp and text of every stamped line.
func stampedLines(out string) (stamps []float64, texts []string) {
	for _, line := range strings.Split(out, "\n") {
		m := stampRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s, _ := strconv.ParseFloat(m[1], 64)
		stamps, texts = append(stamps, s), append(texts, m[2])
	}
	return stamps, texts
}

// firstStamp returns the stamp of the first line containing sub.
func firstStamp(t *testing.T, out, sub string) float64 {
	t.Helper()
	stamps, texts := stampedLines(out)
	for i, text := range texts {
		if strings.Contains(text, sub) {
			return stamps[i]
		}
	}
	t.Fatalf("no stamped line contains %q:\n%s", sub, out)
	return 0
}

func TestOrderTimeout(t *testing.T) {
	t.Parallel()
	out := runExample(t, "ordertimeout", 20*time.Second)
	expectLines(t, out,
		"using embedded redis (REDIS_URL unset) and SQLite in a temporary file; payment window 2s",
		"placed order-1001 (25.00 EUR) and scheduled order.cancel_unpaid in 2s with job id order-1001, in one transaction",
		// Placing it again schedules nothing more.
		"place order-1001 again (the client retried): the order exists already; its timeout is not scheduled twice",
		// Paid orders have their timeout cancelled, in the payment's transaction.
		"order-1001 paid: its timeout job is cancelled in the same transaction",
		"order-1004 paid: its timeout job is cancelled in the same transaction",
		// More time moves the timeout (job.Replace through the outbox).
		"order-1002 asked for more time: window extended by 1s; job.Replace moves its timeout",
		"order-1002's timeout in Redis: scheduled, due in ",
		// The redelivery after a crash finds the order cancelled.
		"order.cancel_unpaid order-1003: simulated crash after the side effect, before the ack",
		"order.cancel_unpaid order-1003 (attempt 2, redelivered after: panic: simulated crash after the side effect): order is already cancelled, nothing to do",
		"payment for order-1002 refused: order-1002: order was cancelled (refund the customer)",
		"final state (timeout jobs: scheduled 0, processing 0, dead 0; outbox rows pending 0):",
		"order-1001 paid      stock released 0 time(s)",
		"order-1002 cancelled stock released 1 time(s)",
		"order-1003 cancelled stock released 1 time(s)",
		"order-1004 paid      stock released 0 time(s)",
	)
	// Paid orders are never cancelled.
	for _, id := range []string{"order-1001", "order-1004"} {
		if strings.Contains(out, "order.cancel_unpaid "+id) {
			t.Errorf("the timeout of paid %s ran:\n%s", id, out)
		}
	}
	// Unpaid orders are cancelled on time: not before their window closed
	// (order-1002's was extended to 3s), and (a loose bound, for busy
	// machines) not long after.
	re := regexp.MustCompile(`order\.cancel_unpaid (order-\d+) \(attempt 1\): cancelled unpaid order, stock released \(lateness (\d+)ms\)`)
	cancelled := map[string]bool{}
	window := map[string]float64{"order-1002": 3.0, "order-1003": 2.0}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		cancelled[m[1]] = true
		if late, _ := strconv.Atoi(m[2]); late > 5000 {
			t.Errorf("%s cancelled %dms late", m[1], late)
		}
		if at := firstStamp(t, out, "order.cancel_unpaid "+m[1]+" (attempt 1)"); at < window[m[1]] {
			t.Errorf("%s cancelled at %.3fs, before its %.0fs window closed", m[1], at, window[m[1]])
		}
	}
	if len(cancelled) != 2 || !cancelled["order-1002"] || !cancelled["order-1003"] {
		t.Errorf("cancelled %v, want order-1002 and order-1003 once each:\n%s", cancelled, out)
	}

	// Afterwards the broker tells a timeout that ran (retained, with its
	// attempts, times and result) from one never scheduled (not found).
	expectLines(t, out,
		"afterwards: did an order's timeout run? The broker keeps timeouts that ran for a week (job.Retain):",
		"order-1005: not found: never scheduled (no timeout pending, dead or run in the last week)",
	)
	if firstStamp(t, out, "afterwards: did an order's timeout run?") < firstStamp(t, out, "final state") {
		t.Errorf("the broker was asked before the final state:\n%s", out)
	}
	ranRE := regexp.MustCompile(`(order-\d+): succeeded in (\d+) attempt\(s\), the last at \d\d:\d\d:\d\d\.\d{3} \((-?\d+)ms after the window closed, for \d+ms\); result "([^"]*)"; kept until (\d{4}-\d\d-\d\d \d\d:\d\d)`)
	ran := map[string]string{}
	for _, m := range ranRE.FindAllStringSubmatch(out, -1) {
		ran[m[1]] = m[2] + " attempt(s), " + m[4]
		if after, _ := strconv.Atoi(m[3]); after < 0 || after > 5000 {
			t.Errorf("%s's timeout started %dms after the window closed", m[1], after)
		}
		until, err := time.ParseInLocation("2006-01-02 15:04", m[5], time.Local)
		if d := time.Until(until); err != nil || d < 7*24*time.Hour-5*time.Minute || d > 7*24*time.Hour {
			t.Errorf("%s's timeout kept until %s (%v), want a week from now", m[1], m[5], err)
		}
	}
	want := map[string]string{"order-1002": "1 attempt(s), cancelled", "order-1003": "2 attempt(s), already cancelled"}
	if len(ran) != len(want) || ran["order-1002"] != want["order-1002"] || ran["order-1003"] != want["order-1003"] {
		t.Errorf("retained timeouts %v, want %v:\n%s", ran, want, out)
	}
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	out := runExample(t, "outbox", 30*time.Second)
	expectLines(t, out,
		"using embedded redis (REDIS_URL unset) and SQLite in a temporary file",
		"placed order-1001 (25.00 EUR) and scheduled its timeout in one transaction (job order-1001, due in 1.5s)",
		// A rollback schedules nothing.
		"place order-1002: card declined after the insert; transaction rolled back: no order, no timeout",
		// Cancel before the job reached Redis, and after.
		"order-1003 paid and its timeout cancelled in one transaction: the job had not reached Redis and never will",
		"outbox before the relay starts: 2 rows pending (order-1001's job; order-1003's cancel)",
		"relay: order-1003's timeout was not in Redis: nothing to remove",
		"redis has order-1001's timeout: true",
		"redis has order-1002's timeout: false",
		"redis has order-1003's timeout: false",
		"relay: order-1004's timeout is in Redis",
		"order-1004 paid and its timeout cancelled in one transaction: the job is in Redis; the relay removes it",
		"relay: order-1004's timeout removed from Redis",
		"order.cancel_unpaid order-1001: window closed, order cancelled",
		"relay: 2 jobs enqueued, 2 cancels applied (1 removed a job, 1 found none), 0 failed rows",
		"order-1001 cancelled timeout ran 1 time(s)",
		"order-1002 absent    timeout ran 0 time(s)",
		"order-1003 paid      timeout ran 0 time(s)",
		"order-1004 paid      timeout ran 0 time(s)",
	)
	for _, id := range []string{"order-1002", "order-1003", "order-1004"} {
		if strings.Contains(out, "order.cancel_unpaid "+id) {
			t.Errorf("the timeout of %s ran:\n%s", id, out)
		}
	}
	if at := firstStamp(t, out, "order.cancel_unpaid order-1001"); at < 1.5 {
		t.Errorf("order-1001 cancelled at %.3fs, before its 1.5s window closed", at)
	}
}

func TestNotify(t *testing.T) {
	t.Parallel()
	out := runExample(t, "notify", 20*time.Second)
	expectLines(t, out,
		"using embedded redis",
		"scheduled 8 reminders",
		// A 4xx is permanent: dead-lettered on the first attempt, listed
		// with its error, redriven after the fix.
		"sms u-6 attempt 1 (lateness ",
		"400 invalid phone number: permanent (retry.Permanent), no retry",
		"dead letter: reminder-u-6 after 1 attempt(s): provider rejected +1555CALLME: 400 invalid phone number",
		"u-6 corrected their number to +15550106",
		"redriven: reminder-u-6",
		"sent to +15550106",
		// 429 honours Retry-After; 5xx backs off; a retry after a lost
		// response is recognised by its idempotency key.
		"429 rate-limited, Retry-After 1s: retry.After schedules the next attempt in exactly 1s",
		"503 service unavailable; retrying with backoff",
		"504 gateway timeout; retrying with backoff",
		"already sent, the provider recognised the Idempotency-Key: not sent twice",
		"done: 8 of 8 reminders sent, 8 of 8 phones received exactly one SMS; queue: scheduled 0, processing 0, dead 0",
		// A login code that no sender started within 250ms is dropped,
		// never sent late (job.ExpireIn); the next one goes out.
		"u-5 asks for a login code while the senders restart; a code is worth sending for 250ms (job.ExpireIn)",
		"otp u-5: login code 0815 delivered",
		"otp: the first code expired before a sender started it: dropped unsent (expired and dropped: 1); dead 0",
		// A burst of chat messages per user becomes one digest SMS with
		// the last count (job.Debounce).
		`digest u-3: 1 SMS ["you have 20 unread messages"]`,
		`digest u-4: 1 SMS ["you have 3 unread messages"]`,
	)
	if strings.Contains(out, "login code 4711 delivered") {
		t.Errorf("the expired login code was sent:\n%s", out)
	}
	// The seeded provider fails the same calls on every run.
	expectLines(t, out, "1 failed before sending (503), 2 sent but the response was lost (504)")

	// Each attempt after a failure waits at least what was asked for: the
	// Retry-After second after a 429, the backoff's first step (100ms
	// -30 % jitter) after a 5xx.
	attemptRE := regexp.MustCompile(`^sms (u-\d) attempt (\d+) \((\d+)ms after the last failure, lateness \d+ms\): `)
	last := map[string]string{}
	retried429, retried5xx := 0, 0
	_, texts := stampedLines(out)
	for _, text := range texts {
		user, _, ok := strings.Cut(strings.TrimPrefix(text, "sms "), " ")
		if !strings.HasPrefix(text, "sms ") || !ok {
			continue
		}
		if m := attemptRE.FindStringSubmatch(text); m != nil {
			waited, _ := strconv.Atoi(m[3])
			switch last[user] {
			case "429":
				retried429++
				if waited < 1000 {
					t.Errorf("%s retried %dms after a 429 with Retry-After 1s", user, waited)
				}
			case "5xx":
				retried5xx++
				if waited < 70 {
					t.Errorf("%s retried %dms after a 5xx, under the backoff's 70ms minimum", user, waited)
				}
			}
		}
		switch {
		case strings.Contains(text, ": 429 "):
			last[user] = "429"
		case strings.Contains(text, ": 503 "), strings.Contains(text, ": 504 "):
			last[user] = "5xx"
		default:
			last[user] = ""
		}
	}
	if retried429 == 0 || retried5xx == 0 {
		t.Errorf("saw %d retries after a 429 and %d after a 5xx, want some of each:\n%s", retried429, retried5xx, out)
	}
}

func TestPipeline(t *testing.T) {
	t.Parallel()
	out := runExample(t, "pipeline", 20*time.Second)
	expectLines(t, out,
		"using embedded redis",
		"per-customer caps in each step: 1 record at a time, acme 3 (its 60-record import answers in 50ms a record)",
		"batch catalogue: 66 fetches added in one call, sealed; each step hands its record on with job.Next",
		// A transient failure is retried.
		"fetch     rec-3 attempt 1 failed: source answered 503 Service Unavailable; retrying with backoff",
		"fetch     rec-3 attempt 2 failed: source answered 503 Service Unavailable; retrying with backoff",
		"fetch     rec-3 attempt 3: ok",
		`transform rec-1: "24.90" -> 2490 cents`,
		// The poison record parks in the dead letters with its error:
		// the batch ends, but does not succeed.
		`transform rec-4 attempt 1: poison input, permanent: price "4,5O" is not a number`,
		"batch catalogue ended (complete callback): 196 steps succeeded, 1 dead",
		"batch catalogue does not succeed while a step is dead: its record waits for a person",
		`parked for a person: transform-rec-4 in queue transform after 1 attempt(s): transform rec-4: price "4,5O" is not a number`,
		// The redrive after the correction goes on with the chain and
		// completes the batch.
		"a person corrects rec-4's price to 4.50 and redrives transform-rec-4",
		`transform rec-4 attempt 1: "4,5O" corrected to "4.50" -> 450 cents`,
		"store     rec-4: upserted",
		"batch catalogue succeeded (success callback): 198 of 198 steps",
		"stored 66 of 66 records:",
		"bakery rec-1 kettle     24.90",
		"bakery rec-2 toaster    39.00",
		"bakery rec-3 teapot     18.50",
		"cafe   rec-4 mug         4.50",
		"cafe   rec-5 spoon       1.20",
		"cafe   rec-6 tray       12.00",
		"acme   60 records of its import",
		// One customer's import does not hold up another's records, and
		// no customer runs above its cap.
		"store     acme: 60 of 60 records of its import stored",
		"most records of one customer at once in fetch:    acme 3 (cap 3), bakery 1 (cap 1), cafe 1 (cap 1)",
		"batch catalogue: 198 steps, 198 succeeded, 0 dead; success callback fired true, complete callback fired true",
		"all checks passed",
	)
	// The order the callbacks promise: the batch succeeds only after the
	// redrive and the last step of its chain.
	before := func(a, b string) {
		t.Helper()
		if firstStamp(t, out, a) > firstStamp(t, out, b) {
			t.Errorf("%q came after %q:\n%s", a, b, out)
		}
	}
	before("store     bakery: all 3 records stored; acme has ", "store     acme: 60 of 60 records of its import stored")
	before("batch catalogue ended (complete callback)", "a person corrects rec-4's price")
	before("a person corrects rec-4's price", "store     rec-4: upserted")
	before("store     rec-4: upserted", "batch catalogue succeeded (success callback)")
	if strings.Count(out, "(success callback)") != 1 || strings.Count(out, "(complete callback)") != 1 {
		t.Errorf("want each of the batch's callbacks once:\n%s", out)
	}
	// No polling loop is left in the program: the callbacks say when.
	src, err := os.ReadFile("pipeline/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, poll := range []string{"time.NewTicker", "time.Tick(", "time.Sleep("} {
		if strings.Contains(string(src), poll) {
			t.Errorf("examples/pipeline/main.go calls %s: a polling loop", poll)
		}
	}
}

func TestGettingStarted(t *testing.T) {
	t.Parallel()
	out := runExample(t, "gettingstarted", 20*time.Second)
	expectLines(t, out,
		"REDIS_URL is unset: using an embedded Redis at 127.0.0.1:",
		"scheduled job ",
		"hello, Ada! (job ",
		"attempt 1, started ",
		"worker stopped",
	)
	if at := firstStamp(t, out, "hello, Ada!"); at < 2.0 {
		t.Errorf("the job scheduled in 2s ran at %.3fs", at)
	}
}

// gettingStartedDoc reads docs/getting-started.md.
func gettingStartedDoc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// The program in docs/getting-started.md is examples/gettingstarted, byte
// for byte, so the doc shows code that is built and run here.
func TestGettingStartedDocIsTheExample(t *testing.T) {
	t.Parallel()
	doc := gettingStartedDoc(t)
	src, err := os.ReadFile(filepath.Join("gettingstarted", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var program string
	for _, block := range strings.Split(doc, "```go\n")[1:] {
		code, _, ok := strings.Cut(block, "```")
		if ok && strings.Contains(code, "package main") {
			program = code
			break
		}
	}
	if program == "" {
		t.Fatal("docs/getting-started.md has no ```go block with a complete program")
	}
	if program != string(src) {
		t.Errorf("the program in docs/getting-started.md differs from examples/gettingstarted/main.go; copy the file into the doc")
	}
}

// A newcomer runs the doc's commands in an empty module. The test does the
// same, with the module pointed at this checkout instead of a release. It
// uses the environment's module proxy settings, as a newcomer's go command
// does: "go mod tidy" of a new module reads go.mod files of versions this
// module never builds with, which a fresh module cache does not hold.
func TestGettingStartedInNewModule(t *testing.T) {
	t.Parallel()
	doc := gettingStartedDoc(t)
	steps := [][]string{
		{"go", "mod", "init", "example.com/hello"},
		{"go", "get", "github.com/delayq/delayq"},
		{"go", "mod", "tidy"},
		{"go", "run", "."},
	}
	for _, s := range steps {
		if cmd := strings.Join(s, " "); !strings.Contains(doc, cmd) {
			t.Errorf("docs/getting-started.md no longer says %q", cmd)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("gettingstarted", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(withoutEnv(withoutEnv(os.Environ(), "REDIS_URL"), "GOFLAGS"), "GOFLAGS="+goEnv(t, "GOFLAGS")+" -mod=mod", "GOWORK=off")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(steps[0]...)
	// Before the first release: use this checkout, with its checksums.
	run("go", "mod", "edit", "-replace", "github.com/delayq/delayq="+root)
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	// The doc's "go get github.com/delayq/delayq" asks the proxy for the
	// newest release; until there is one, the checkout stands in for it at
	// the version Go gives a replaced module without releases.
	run("go", "get", "github.com/delayq/delayq@v0.0.0-00010101000000-000000000000")
	run(steps[2]...)
	run("go", "build", "-o", "hello", ".")
	out := run(filepath.Join(dir, "hello"))
	expectLines(t, out, "REDIS_URL is unset: using an embedded Redis", "hello, Ada! (job ", "worker stopped")
}

// Relative links in README.md and docs/*.md point at files that exist.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join("..", "README.md"))
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeRE := regexp.MustCompile("(?s)```.*?```|`[^`\n]*`")
	checked := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		prose := codeRE.ReplaceAllString(string(text), "")
		for _, m := range linkRE.FindAllStringSubmatch(prose, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, m[1])
			}
		}
	}
	if checked == 0 {
		t.Error("found no relative links to check")
	}
}
