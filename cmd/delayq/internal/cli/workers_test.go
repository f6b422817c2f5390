package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
	"github.com/delayq/delayq/worker"
)

// childEnv makes the test binary run runChild instead of the tests: a
// process with a real worker and a real periodic scheduler, for the tests
// that kill it.
const childEnv = "DELAYQ_CLI_TEST_CHILD"

// childTTL is the registry expiry of the child's processes.
const childTTL = 2 * time.Second

// runChild runs a worker of queue $CHILD_QUEUE whose handler never returns
// and a periodic scheduler, each registering itself in the process
// registry, until it is killed.
func runChild() int {
	addrs := strings.Split(os.Getenv("CHILD_ADDRS"), ",")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, MasterName: os.Getenv("CHILD_MASTER")})
	ns, queue := os.Getenv("CHILD_NS"), os.Getenv("CHILD_QUEUE")
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	reg := job.NewRegistry()
	job.New[map[string]int]("order.ship", job.Queue(queue)).Handle(reg, func(ctx context.Context, j *job.Job[map[string]int]) error {
		<-ctx.Done()
		return ctx.Err()
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Queues: []worker.Queue{{Name: queue}}, Concurrency: 4, Lease: 5 * time.Minute, ProcessTTL: childTTL})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := periodic.New(b, periodic.Options{ProcessTTL: childTTL})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	nightly := job.New[map[string]int]("report.nightly", job.Queue("reports"))
	if err := periodic.Add(s, "nightly", "0 3 * * *", nightly, map[string]int{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = s.Run(ctx) }()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type workersOut struct {
	Now       string `json:"now"`
	Processes []struct {
		ID       string          `json:"id"`
		Role     string          `json:"role"`
		PID      int             `json:"pid"`
		Queues   []fleet.Queue   `json:"queues"`
		Types    []string        `json:"types"`
		Seen     string          `json:"seen"`
		Expires  string          `json:"expires"`
		TTLMS    int64           `json:"ttl_ms"`
		Held     int             `json:"held"`
		HeldJobs []fleet.HeldJob `json:"held_jobs"`
	} `json:"processes"`
}

// TestWorkersAfterSIGKILL: a worker process and a periodic scheduler
// register themselves; `delayq workers ls` lists both with their queues and
// types, and stats does not flag their queue. After the process is killed
// with SIGKILL, both stay listed until their expiry after their last
// heartbeat, then are gone; stats (table and --json) then flags the jobs
// the worker held as processing with no live worker serving the queue.
func TestWorkersAfterSIGKILL(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const queue = "orders"
	for i := range 3 {
		if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: fmt.Sprintf("o-%d", i), Queue: queue, Type: "order.ship", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), childEnv+"=1", "CHILD_NS="+tb.ns, "CHILD_QUEUE="+queue,
		"CHILD_ADDRS="+strings.Join(redistest.TopologyAddrs(t), ","))
	if redistest.Topology() == "sentinel" {
		child.Env = append(child.Env, "CHILD_MASTER="+redistest.SentinelMaster)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	var ls workersOut
	// The worker's record lists the 3 jobs it holds from its next beat on.
	redistest.WaitFor(t, 60*time.Second, "the worker holds 3 jobs, its record lists them and both processes are listed", func() bool {
		ls = workersOut{}
		tb.okJSON(t, &ls, "workers", "ls")
		held := false
		for _, p := range ls.Processes {
			held = held || (p.Role == fleet.RoleWorker && p.Held == 3)
		}
		return len(ls.Processes) == 2 && held && tb.rdb.ZCard(tb.ctx, tb.key(queue, "processing")).Val() == 3
	})
	roles := map[string]int{}
	for _, p := range ls.Processes {
		roles[p.Role]++
		if p.PID != child.Process.Pid || p.TTLMS != childTTL.Milliseconds() {
			t.Errorf("process %+v: want pid %d, ttl %s", p, child.Process.Pid, childTTL)
		}
		if p.Role == fleet.RoleWorker && (len(p.Queues) != 1 || p.Queues[0] != (fleet.Queue{Name: queue, Concurrency: 4}) || len(p.Types) != 1 || p.Types[0] != "order.ship") {
			t.Errorf("worker recorded %+v", p)
		}
		if p.Role == fleet.RoleWorker {
			want := []fleet.HeldJob{{Queue: queue, ID: "o-0"}, {Queue: queue, ID: "o-1"}, {Queue: queue, ID: "o-2"}}
			if !slices.Equal(p.HeldJobs, want) {
				t.Errorf("worker's held jobs %v, want %v", p.HeldJobs, want)
			}
		}
	}
	if roles[fleet.RoleWorker] != 1 || roles[fleet.RoleScheduler] != 1 {
		t.Fatalf("roles listed: %v", roles)
	}
	out := tb.ok(t, "workers", "ls")
	if !strings.Contains(out, "ROLE       HOST") || !strings.Contains(out, "orders×4") || !strings.Contains(out, "1 schedules") {
		t.Errorf("workers ls:\n%s", out)
	}
	if out := tb.ok(t, "stats"); strings.Contains(out, "no live worker") {
		t.Errorf("stats flags a served queue:\n%s", out)
	}

	// The last heartbeat before the kill: none of them can be later.
	var lastSeen time.Time
	for _, p := range ls.Processes {
		seen, _ := time.Parse(time.RFC3339Nano, p.Seen)
		if seen.After(lastSeen) {
			lastSeen = seen
		}
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	var gone time.Time
	redistest.WaitFor(t, 60*time.Second, "the killed processes drop out", func() bool {
		ls = workersOut{}
		tb.okJSON(t, &ls, "workers", "ls")
		gone, _ = time.Parse(time.RFC3339Nano, ls.Now)
		return len(ls.Processes) == 0
	})
	// Each process's last heartbeat was no earlier than the one listed
	// before the kill, so none dropped out before childTTL after it.
	if gone.Before(lastSeen.Add(childTTL)) {
		t.Errorf("gone at %s, before the expiry of heartbeats seen until %s", gone, lastSeen)
	}
	if out := tb.ok(t, "workers", "ls"); !strings.HasPrefix(out, "no live processes in namespace") {
		t.Errorf("workers ls with none:\n%s", out)
	}

	out = tb.ok(t, "stats")
	if !strings.Contains(out, "orders (no live worker)") ||
		!strings.Contains(out, "warning: queue orders: 3 jobs processing and no live worker serves it") {
		t.Errorf("stats after the kill:\n%s", out)
	}
	var st struct {
		Queues []struct {
			Queue        string `json:"queue"`
			Processing   int64  `json:"processing"`
			ServedBy     int    `json:"served_by"`
			HeldUnserved bool   `json:"held_unserved"`
		} `json:"queues"`
	}
	tb.okJSON(t, &st, "stats", "--queue", queue)
	if len(st.Queues) != 1 || st.Queues[0].Processing != 3 || st.Queues[0].ServedBy != 0 || !st.Queues[0].HeldUnserved {
		t.Errorf("stats --json after the kill: %+v", st.Queues)
	}
	raw, _ := json.Marshal(st)
	t.Logf("stats --json: %s", raw)
}

// TestRedisURLAtClusterNode: a redis:// URL naming one node of a Redis
// Cluster is refused at connect time, as bad usage, with the URL to use
// instead, rather than failing later with a raw MOVED.
func TestRedisURLAtClusterNode(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	addr := c.Addrs()[0]
	r := runBinary(t, []string{"REDIS_URL=redis://" + addr + "/0"}, "", "stats")
	if r.code != 2 || !strings.Contains(r.stderr, "is a node of a Redis Cluster; use redis+cluster://"+addr) || strings.Contains(r.stderr, "MOVED") {
		t.Errorf("stats on a cluster node with redis://: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBinary(t, []string{"REDIS_URL=redis+cluster://" + addr}, "", "stats"); r.code != 0 {
		t.Errorf("stats with redis+cluster://: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRescheduleFindsQueue: jobs reschedule without --queue finds the one
// queue holding the id (docs/operations.md's `jobs reschedule order-42 --in
// 2h`), names the queues when the id is in several, and says so when in
// none.
func TestRescheduleFindsQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, e := range []*job.Envelope{
		{ID: "order-42", Queue: "orders", Type: "order.ship", Payload: []byte(`{}`)},
		{ID: "twin", Queue: "a", Type: "t", Payload: []byte(`{}`)},
		{ID: "twin", Queue: "b", Type: "t", Payload: []byte(`{}`)},
	} {
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if out := tb.ok(t, "jobs", "reschedule", "order-42", "--in", "2h"); !strings.HasPrefix(out, "rescheduled order-42 to ") {
		t.Errorf("reschedule without --queue: %q", out)
	}
	j, err := tb.b.Job(tb.ctx, "orders", "order-42")
	if err != nil || time.Until(j.ReadyAt) < 90*time.Minute {
		t.Errorf("after the reschedule: ready %v, %v", j.ReadyAt, err)
	}
	if r := tb.run(t, "jobs", "reschedule", "twin", "--in", "1h"); r.code != 1 || !strings.Contains(r.stderr, `job id "twin" is in 2 queues (a, b): give --queue`) {
		t.Errorf("ambiguous id: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := tb.run(t, "jobs", "reschedule", "nope", "--in", "1h"); r.code != 1 || !strings.Contains(r.stderr, `job "nope" not found in any of the 3 queues`) {
		t.Errorf("unknown id: exit %d, stderr %q", r.code, r.stderr)
	}
}
