package broker_test

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// scriptNames are the scripts of scripts/, each a function of the library.
func scriptNames(t *testing.T) []string {
	t.Helper()
	_, code := broker.FunctionLibrary()
	var names []string
	for _, m := range regexp.MustCompile(`function_name='delayq_[0-9a-f]{16}_([a-z_]+)'`).FindAllStringSubmatch(code, -1) {
		names = append(names, m[1])
	}
	return names
}

// TestFunctionLibrary: the library has one function per script, named
// after the library, which is named after a hash of the code; read-only
// scripts are no-writes, those that only add data refuse to run over
// maxmemory, the rest may (so that workers drain a full server).
func TestFunctionLibrary(t *testing.T) {
	t.Parallel()
	name, code := broker.FunctionLibrary()
	if !regexp.MustCompile(`^delayq_[0-9a-f]{16}$`).MatchString(name) || !strings.HasPrefix(code, "#!lua name="+name+"\n") {
		t.Fatalf("library %q, code starting %.60q", name, code)
	}
	files, err := scriptFiles()
	if err != nil {
		t.Fatal(err)
	}
	if got := scriptNames(t); !slices.Equal(slices.Sorted(slices.Values(got)), files) {
		t.Fatalf("functions %v, scripts %v", got, files)
	}
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`function_name='delayq_[0-9a-f]{16}_([a-z_]+)', flags=\{([^}]*)\}`).FindAllStringSubmatch(code, -1) {
		flags[m[1]] = m[2]
	}
	// Every script is in one of the lists: a new one must be placed.
	want := map[string]string{}
	for _, s := range []string{"job", "page", "stats", "keys"} {
		want[s] = "'no-writes'"
	}
	for _, s := range []string{"enqueue", "batch_create", "batch_add", "progress", "pause", "limit", "cap", "keycap", "keypause", "keyrate", "keyfair", "keyweight"} {
		want[s] = "" // refused over maxmemory
	}
	for _, s := range []string{"claim", "settle", "extend", "reap", "cancel", "reschedule", "redrive", "dead_delete", "trim", "batch_end", "batch_fired", "batch_clear", "dead_add", "take_trimmed"} {
		want[s] = "'allow-oom'"
	}
	for _, f := range files {
		w, ok := want[f]
		switch {
		case !ok:
			t.Errorf("script %s is in no list of this test: say whether it only reads, only adds data, or moves, ends or removes jobs", f)
		case flags[f] != w:
			t.Errorf("%s: flags %q, want %q", f, flags[f], w)
		}
	}
	if len(want) != len(files) {
		t.Errorf("the test lists %d scripts, scripts/ has %d", len(want), len(files))
	}
}

// scriptFiles lists the script files (without the prelude), sorted.
func scriptFiles() ([]string, error) {
	files, err := filepath.Glob("scripts/*.lua")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		n := strings.TrimSuffix(f[len("scripts/"):], ".lua")
		if n != "prelude" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// TestLoadFunctions loads the library (on every master of a cluster),
// again without harm, lists it, and runs a producer's and a worker's calls
// through FCALL; a broker whose server lacks the library, or holds only
// another version of it, fails with ErrFunctionsNotLoaded naming the
// library, and changes nothing.
func TestLoadFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	name, err := broker.LoadFunctions(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := broker.LoadFunctions(ctx, rdb); err != nil || again != name {
		t.Fatalf("second load: %q, %v", again, err)
	}
	libs, masters, err := broker.FunctionLibraries(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	if redistest.Topology() == "cluster" {
		want = 3
	}
	i := slices.IndexFunc(libs, func(l broker.FunctionLibraryStatus) bool { return l.Name == name })
	if masters != want || i < 0 || !libs[i].Current || libs[i].Masters != want {
		t.Fatalf("libraries %+v on %d masters, want %s current on %d", libs, masters, name, want)
	}

	b := testkit.NewBroker(t, rdb, broker.Options{Namespace: ns, Functions: true})
	if err := b.Enqueue(ctx, &job.Envelope{ID: "a", Queue: "q", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	res, err := testkit.Drive(b).Claim(ctx, "q", 1, time.Minute)
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claim through FCALL: %+v, %v", res, err)
	}
	if err := testkit.Drive(b).Ack(ctx, res.Jobs[0].Lease); err != nil {
		t.Fatal(err)
	}
	if st, err := testkit.OneStats(b.Stats(ctx, "q")); err != nil || st.Scheduled+st.Processing != 0 {
		t.Fatalf("stats through FCALL_RO: %+v, %v", st, err)
	}
}

// TestFunctionsNotLoaded: on a server without this build's library (none,
// or only one of another version) every call of a broker with Functions
// fails with ErrFunctionsNotLoaded naming the library and how to load it,
// and no job is stored (the queue's name is registered, as before any
// enqueue).
func TestFunctionsNotLoaded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := testkit.NewBroker(t, rdb, broker.Options{Functions: true})
	name, code := broker.FunctionLibrary()
	check := func(what string) {
		t.Helper()
		err := b.Enqueue(ctx, &job.Envelope{ID: "a", Queue: "q", Type: "t", Payload: []byte(`{}`)})
		if !errors.Is(err, broker.ErrFunctionsNotLoaded) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "delayq admin load-functions") {
			t.Errorf("%s: enqueue: %v, want ErrFunctionsNotLoaded naming %s and the command", what, err, name)
		}
		if _, err := testkit.OneStats(b.Stats(ctx, "q")); !errors.Is(err, broker.ErrFunctionsNotLoaded) {
			t.Errorf("%s: stats: %v, want ErrFunctionsNotLoaded", what, err)
		}
		if keys, err := rdb.Keys(ctx, "delayq:{q}:*").Result(); err != nil || len(keys) != 0 {
			t.Errorf("%s: keys of the queue stored: %v, %v", what, keys, err)
		}
	}
	check("no library")
	other := strings.ReplaceAll(code, name, broker.FunctionLibraryPrefix+"00000000000000ff")
	if err := rdb.FunctionLoad(ctx, other).Err(); err != nil {
		t.Fatal(err)
	}
	check("another version loaded")
	libs, _, err := broker.FunctionLibraries(ctx, rdb)
	if err != nil || len(libs) != 1 || libs[0].Current || libs[0].Name != broker.FunctionLibraryPrefix+"00000000000000ff" {
		t.Fatalf("libraries %+v, %v", libs, err)
	}
	if _, err := broker.LoadFunctions(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(ctx, &job.Envelope{ID: "a", Queue: "q", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("enqueue once loaded beside the other version: %v", err)
	}
	if err := broker.DeleteFunctions(ctx, rdb, broker.FunctionLibraryPrefix+"00000000000000ff"); err != nil {
		t.Fatal(err)
	}
	if err := broker.DeleteFunctions(ctx, rdb, broker.FunctionLibraryPrefix+"00000000000000ff"); err != nil {
		t.Fatalf("deleting a library no server holds: %v", err)
	}
	for _, bad := range []string{"", "delayq_", "mylib", "delayq_XYZ", "delayq_12 34"} {
		if err := broker.DeleteFunctions(ctx, rdb, bad); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("DeleteFunctions(%q): %v, want job.ErrInvalid", bad, err)
		}
	}
	if libs, _, err := broker.FunctionLibraries(ctx, rdb); err != nil || len(libs) != 1 || !libs[0].Current {
		t.Fatalf("libraries after deleting the other: %+v, %v", libs, err)
	}
}

// TestFunctionsUnsupported: a server without FCALL (before Redis 7; here
// the embedded miniredis) gives ErrFunctionsNotLoaded saying so, and
// LoadFunctions an error that says Redis 7 is needed.
func TestFunctionsUnsupported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b := testkit.NewBroker(t, rdb, broker.Options{Functions: true})
	err := b.Enqueue(ctx, &job.Envelope{ID: "a", Queue: "q", Type: "t", Payload: []byte(`{}`)})
	if !errors.Is(err, broker.ErrFunctionsNotLoaded) || !strings.Contains(err.Error(), "need Redis 7") {
		t.Errorf("enqueue: %v, want ErrFunctionsNotLoaded saying Redis 7 is needed", err)
	}
	if _, err := broker.LoadFunctions(ctx, rdb); err == nil || !strings.Contains(err.Error(), "need Redis 7") {
		t.Errorf("LoadFunctions: %v, want an error saying Redis 7 is needed", err)
	}
}

// TestFunctionsDurable: with WaitReplicas the FCALL goes in the pipeline
// with WAIT, and a shortfall is ErrNotReplicated as with EVALSHA.
func TestFunctionsDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t)
	rdb := master.Client(t)
	if _, err := broker.LoadFunctions(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	b := testkit.NewBroker(t, rdb, broker.Options{Functions: true, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err := b.Enqueue(ctx, &job.Envelope{ID: "a", Queue: "q", Type: "t", Payload: []byte(`{}`)}); !errors.Is(err, broker.ErrNotReplicated) {
		t.Fatalf("enqueue without replica: %v, want ErrNotReplicated", err)
	}
	if ok, err := rdb.HExists(ctx, "delayq:{q}:jobs", "a").Result(); err != nil || !ok {
		t.Fatalf("the unconfirmed job is not stored: %v, %v", ok, err)
	}
	if _, err := testkit.OneStats(b.Stats(ctx, "q")); err != nil {
		t.Fatalf("stats (read-only) waits for replicas: %v", err)
	}
}

// BenchmarkFunctions compares the two ways of running a script on one
// server of its own: EVALSHA (the default) and FCALL/FCALL_RO of the
// loaded library (Options.Functions), for a single-job enqueue, a stats
// read (read-only) and a claim and ack of 100 jobs. server-us/call is the
// server's own time per script call (INFO commandstats of evalsha, or
// fcall and fcall_ro).
func BenchmarkFunctions(b *testing.B) {
	for _, functions := range []bool{false, true} {
		mode := "evalsha"
		if functions {
			mode = "fcall"
		}
		srv := redistest.Start(b)
		rdb := srv.Client(b)
		if _, err := broker.LoadFunctions(context.Background(), rdb); err != nil {
			b.Fatal(err)
		}
		br := testkit.NewBroker(b, rdb, broker.Options{Functions: functions})
		ctx := context.Background()
		serverTime := func() (usec, calls float64) {
			s := rdb.Info(ctx, "commandstats").Val()
			for _, cmd := range []string{"evalsha", "eval", "fcall", "fcall_ro"} {
				m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+),usec=(\d+),`).FindStringSubmatch(s)
				if m != nil {
					c, _ := strconv.ParseFloat(m[1], 64)
					u, _ := strconv.ParseFloat(m[2], 64)
					usec, calls = usec+u, calls+c
				}
			}
			return usec, calls
		}
		report := func(b *testing.B, usec0, calls0 float64) {
			usec, calls := serverTime()
			if calls > calls0 {
				b.ReportMetric((usec-usec0)/(calls-calls0), "server-us/call")
			}
		}
		n := 0
		env := func(delay time.Duration) *job.Envelope {
			n++
			return &job.Envelope{ID: "j" + strconv.Itoa(n), Queue: "bench", Type: "order.cancel", Payload: []byte(`{"order_id":"ord-000123","amount_cents":4599}`), MaxRetries: 10, Delay: delay}
		}
		b.Run(mode+"/enqueue", func(b *testing.B) {
			b.ReportAllocs()
			usec0, calls0 := serverTime()
			for b.Loop() {
				if err := br.Enqueue(ctx, env(time.Hour)); err != nil {
					b.Fatal(err)
				}
			}
			report(b, usec0, calls0)
		})
		b.Run(mode+"/stats", func(b *testing.B) {
			b.ReportAllocs()
			usec0, calls0 := serverTime()
			for b.Loop() {
				if _, err := testkit.OneStats(br.Stats(ctx, "bench")); err != nil {
					b.Fatal(err)
				}
			}
			report(b, usec0, calls0)
		})
		b.Run(mode+"/claim-ack-100", func(b *testing.B) {
			b.ReportAllocs()
			envs := make([]*job.Envelope, 100)
			var usec, calls float64
			for b.Loop() {
				b.StopTimer()
				for j := range envs {
					envs[j] = env(0)
				}
				if err := br.Enqueue(ctx, envs...); err != nil {
					b.Fatal(err)
				}
				u0, c0 := serverTime()
				b.StartTimer()
				res, err := testkit.Drive(br).Claim(ctx, "bench", 100, time.Minute)
				if err != nil || len(res.Jobs) != 100 {
					b.Fatalf("claimed %d: %v", len(res.Jobs), err)
				}
				leases := make([]protocol.Lease, len(res.Jobs))
				for i, c := range res.Jobs {
					leases[i] = c.Lease
				}
				if err := testkit.Drive(br).Ack(ctx, leases...); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				u1, c1 := serverTime()
				usec, calls = usec+u1-u0, calls+c1-c0
				b.StartTimer()
			}
			if calls > 0 {
				b.ReportMetric(usec/calls, "server-us/call")
			}
		})
	}
}
