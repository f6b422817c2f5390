package faulttest_test

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
)

// killRun describes a run of the capped suites
// (TestConcurrencyCapAcrossWorkers, TestKeyCapAcrossWorkers,
// TestKeyFlowControlOnCluster): jobs already enqueued in queue, run by
// three faultworker processes of 8 slots that record their handlers'
// spans, the oldest SIGKILLed twice (or kills times), every 1.5 s (or
// every).
type killRun struct {
	bin   string                // the faultworker binary
	url   string                // FAULTWORKER_URL
	rdb   redis.UniversalClient // reads the workers' records
	b     *broker.Broker        // tells when queue is drained
	ns    string
	queue string
	delay string        // FAULTWORKER_DELAY: a handler sleeps up to this long
	drain time.Duration // how long the queue may take to drain
	// group names the group a job's handlers are counted in, from its id.
	group func(id string) string
	kills int           // how many workers to SIGKILL (0: 2)
	every time.Duration // the time before each kill (0: 1.5 s)
}

// spanEvent is a handler's start (+1) or end (-1) at a unix ns.
type spanEvent struct {
	at    int64
	delta int
}

// killed is what a killRun ran.
type killed struct {
	// events are the starts and ends of each group's handlers, in time
	// order, ends before starts at the same instant (a slot is freed
	// before it is taken again); a killed worker's handlers that never
	// ended end at its death.
	events map[string][]spanEvent
	kills  int             // workers SIGKILLed
	want   int             // workers the run meant to SIGKILL
	cut    int             // handlers ended by their worker's death
	ok     map[string]bool // ids of the jobs a handler succeeded
}

// run starts three workers, SIGKILLs the oldest 1.5 s (r.every) after the
// start and again 1.5 s later (r.kills times in all), each time starting a
// new one, waits for the queue to drain, stops the rest with SIGTERM and
// reads their records. Each kill waits, after its time, until the victim
// has a handler running by the span records (at most 10 s more): work
// that comes in bursts (jobs under rate limits) leaves workers idle in
// between, and a kill then would cut nothing. A handler that never ended
// in a worker that was not killed fails the test.
func (r killRun) run(t *testing.T) killed {
	t.Helper()
	ctx := context.Background()
	env := []string{"FAULTWORKER_FAIL=0", "FAULTWORKER_DELAY=" + r.delay, "FAULTWORKER_CONCURRENCY=8", "FAULTWORKER_SPANS=1"}
	started := 0
	spawn := func() *workerProc {
		started++
		return startWorkerProc(t, r.bin, r.url, r.ns, "w"+strconv.Itoa(started), env...)
	}
	procs := []*workerProc{spawn(), spawn(), spawn()}
	deaths := map[string]int64{} // worker -> unix ns after its death
	kills, every := cmp.Or(r.kills, 2), cmp.Or(r.every, 1500*time.Millisecond)
	read := int64(0)                   // span records read so far
	running := map[string]int{}        // worker -> its handlers running
	busy := func(worker string) bool { // reads the new span records
		lines, err := r.rdb.LRange(ctx, r.ns+":spans", read, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		read += int64(len(lines))
		for _, l := range lines {
			if f := strings.Fields(l); len(f) == 5 {
				switch f[0] {
				case "start":
					running[f[1]]++
				case "end":
					running[f[1]]--
				}
			}
		}
		return running[worker] > 0
	}
	for range kills {
		time.Sleep(every)
		victim := procs[0]
		for deadline := time.Now().Add(10 * time.Second); !busy(victim.name) && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond)
		}
		victim.signal(syscall.SIGKILL, 0)
		deaths[victim.name] = time.Now().UnixNano()
		procs = append(procs[1:], spawn())
	}
	waitDrained(t, r.b, r.queue, r.drain)
	for _, p := range procs {
		p.signal(syscall.SIGTERM, 10*time.Second)
	}

	// What ran when, per group.
	lines, err := r.rdb.LRange(ctx, r.ns+":spans", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := killed{events: map[string][]spanEvent{}, kills: len(deaths), want: kills, ok: map[string]bool{}}
	open := map[string]string{} // "worker id attempt" -> worker, for handlers that never ended
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("bad span record %q", l)
		}
		at, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			t.Fatalf("bad span record %q", l)
		}
		span, g := f[1]+" "+f[2]+" "+f[3], r.group(f[2])
		switch f[0] {
		case "start":
			out.events[g] = append(out.events[g], spanEvent{at, +1})
			open[span] = f[1]
		case "end":
			out.events[g] = append(out.events[g], spanEvent{at, -1})
			delete(open, span)
		default:
			t.Fatalf("bad span record %q", l)
		}
	}
	for span, w := range open {
		died, ok := deaths[w]
		if !ok {
			t.Fatalf("handler %q never ended, and its worker was not killed", span)
		}
		g := r.group(strings.Fields(span)[1])
		out.events[g] = append(out.events[g], spanEvent{died, -1})
		out.cut++
	}
	for _, evs := range out.events {
		slices.SortFunc(evs, func(a, b spanEvent) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.delta - b.delta
		})
	}

	log, err := r.rdb.LRange(ctx, r.ns+":log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range log {
		if f := strings.Fields(l); len(f) == 4 && f[3] == "ok" {
			out.ok[f[0]] = true
		}
	}
	return out
}

// check fails the test unless both kills cut running handlers short and
// total distinct jobs succeeded.
func (k killed) check(t *testing.T, total int) {
	t.Helper()
	if k.kills != k.want || k.cut == 0 {
		t.Errorf("%d workers killed, %d handlers cut short: the kills did not hit running jobs", k.kills, k.cut)
	}
	if len(k.ok) != total {
		t.Errorf("%d of %d jobs succeeded", len(k.ok), total)
	}
}

// peak is the most handlers running at once in evs, which are in the
// order killed.events keeps.
func peak(evs []spanEvent) int {
	running, top := 0, 0
	for _, e := range evs {
		running += e.delta
		top = max(top, running)
	}
	return top
}
