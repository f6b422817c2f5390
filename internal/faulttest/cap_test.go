package faulttest_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/job"
)

// TestConcurrencyCapAcrossWorkers runs 600 jobs of a type capped at 5
// (broker.SetConcurrency) through three faultworker processes of 8 slots
// each, SIGKILLing one of them twice and starting a new one each time. Every
// handler records when it starts and ends; a killed worker's handlers end
// at its death. At no instant do more than 5 handlers run, every job runs
// to success, and the cap is reached (the 24 slots would run more).
func TestConcurrencyCapAcrossWorkers(t *testing.T) {
	skipSlow(t)
	bin := buildFaultWorker(t)
	srv := startServer(t)
	const ns, queue, total, cap = "capfault", job.DefaultQueue, 600, 5
	s := newSuite(t, srv, ns, queue)
	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	if err := s.b.SetConcurrency(s.ctx, queue, typ.Name(), cap); err != nil {
		t.Fatal(err)
	}
	envs := make([]*job.Envelope, total)
	for i := range envs {
		e, err := typ.Envelope(crashArgs{N: i}, job.ID(fmt.Sprintf("c%04d", i)))
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	if err := s.b.Enqueue(s.ctx, envs...); err != nil {
		t.Fatal(err)
	}

	url := "redis://" + srv.Addr() + "/0"
	env := []string{"FAULTWORKER_FAIL=0", "FAULTWORKER_DELAY=60ms", "FAULTWORKER_CONCURRENCY=8", "FAULTWORKER_SPANS=1"}
	started := 0
	spawn := func() *workerProc {
		started++
		return startWorkerProc(t, bin, url, ns, "w"+strconv.Itoa(started), env...)
	}
	procs := []*workerProc{spawn(), spawn(), spawn()}
	deaths := map[string]int64{} // worker -> unix ns after its death
	for range 2 {
		time.Sleep(1500 * time.Millisecond)
		victim := procs[0]
		victim.signal(syscall.SIGKILL, 0)
		deaths[victim.name] = time.Now().UnixNano()
		procs = append(procs[1:], spawn())
	}
	s.waitDrained(t, queue, 90*time.Second)
	for _, p := range procs {
		p.signal(syscall.SIGTERM, 10*time.Second)
	}

	// What ran when.
	lines, err := s.rdb.LRange(s.ctx, ns+":spans", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		at    int64
		delta int
	}
	var events []event
	open := map[string]string{} // worker id attempt -> worker, for handlers that never ended
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("bad span record %q", l)
		}
		at, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			t.Fatalf("bad span record %q", l)
		}
		key := f[1] + " " + f[2] + " " + f[3]
		switch f[0] {
		case "start":
			events = append(events, event{at, +1})
			open[key] = f[1]
		case "end":
			events = append(events, event{at, -1})
			delete(open, key)
		default:
			t.Fatalf("bad span record %q", l)
		}
	}
	cut := 0
	for key, w := range open {
		died, ok := deaths[w]
		if !ok {
			t.Fatalf("handler %q never ended, and its worker was not killed", key)
		}
		events = append(events, event{died, -1})
		cut++
	}
	// Ends before starts at the same instant: a slot is freed before it is
	// taken again.
	slices.SortFunc(events, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta
	})
	running, most, atCap, busy := 0, 0, time.Duration(0), time.Duration(0)
	for i, e := range events {
		running += e.delta
		most = max(most, running)
		if i+1 < len(events) {
			d := time.Duration(events[i+1].at - e.at)
			busy += time.Duration(running) * d
			if running == cap {
				atCap += d
			}
		}
	}
	span := time.Duration(events[len(events)-1].at - events[0].at)
	if most > cap {
		t.Errorf("%d handlers ran at once under a cap of %d", most, cap)
	}
	if most < cap {
		t.Errorf("at most %d handlers ran at once: the cap of %d was never reached, so this run shows nothing", most, cap)
	}
	if len(deaths) != 2 || cut == 0 {
		t.Errorf("%d workers killed, %d handlers cut short: the kills did not hit running jobs", len(deaths), cut)
	}

	// Every job succeeded; none is left.
	log, err := s.rdb.LRange(s.ctx, ns+":log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]bool{}
	for _, l := range log {
		if f := strings.Fields(l); len(f) == 4 && f[3] == "ok" {
			ok[f[0]] = true
		}
	}
	if len(ok) != total {
		t.Errorf("%d of %d jobs succeeded", len(ok), total)
	}
	if err := s.b.SetConcurrency(s.ctx, queue, typ.Name(), 0); err != nil {
		t.Fatal(err)
	}
	dead := s.finish(t, []string{queue}, ns+":log", ns+":spans")
	if dead != 0 {
		t.Errorf("%d dead records", dead)
	}
	summary(t, "jobs", total, "workers", 3, "kills", len(deaths), "handlers cut by a kill", cut,
		"most running at once", most, "cap", cap, "run", span.Round(time.Millisecond),
		"time at the cap", atCap.Round(time.Millisecond), "slots busy", fmt.Sprintf("%.0f%%", 100*float64(busy)/float64(cap*span)))
}
