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

// TestKeyCapAcrossWorkers runs 3,000 jobs of 1,000 keys (3 each) capped at
// 2 per key (broker.SetKeyConcurrency) through three faultworker processes
// of 8 slots each, SIGKILLing one of them twice and starting a new one each
// time. From every handler's start and end records (a killed worker's
// handlers end at its death): no key ever has more than 2 handlers running
// at once, keys reach their cap, every job succeeds, and at the end no key
// holds a slot (the per-key counts are gone) and no job is held.
func TestKeyCapAcrossWorkers(t *testing.T) {
	skipSlow(t)
	bin := buildFaultWorker(t)
	srv := startServer(t)
	const ns, queue, keys, perKey, cap = "keycapfault", job.DefaultQueue, 1000, 3, 2
	s := newSuite(t, srv, ns, queue)
	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	if err := s.b.SetKeyConcurrency(s.ctx, queue, "", cap); err != nil {
		t.Fatal(err)
	}
	var envs []*job.Envelope
	for k := range keys {
		for i := range perKey {
			e, err := typ.Envelope(crashArgs{N: k*perKey + i}, job.ID(fmt.Sprintf("k%04d-%d", k, i)), job.Key(fmt.Sprintf("k%04d", k)))
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, e)
		}
	}
	if err := s.b.Enqueue(s.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	total := len(envs)

	url := "redis://" + srv.Addr() + "/0"
	env := []string{"FAULTWORKER_FAIL=0", "FAULTWORKER_DELAY=30ms", "FAULTWORKER_CONCURRENCY=8", "FAULTWORKER_SPANS=1"}
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
	s.waitDrained(t, queue, 120*time.Second)
	for _, p := range procs {
		p.signal(syscall.SIGTERM, 10*time.Second)
	}

	// What ran when, per key.
	lines, err := s.rdb.LRange(s.ctx, ns+":spans", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		at    int64
		delta int
	}
	events := map[string][]event{} // key -> its handlers' starts and ends
	open := map[string]string{}    // worker id attempt -> worker, for handlers that never ended
	keyOf := func(id string) string { k, _, _ := strings.Cut(id, "-"); return k }
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("bad span record %q", l)
		}
		at, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			t.Fatalf("bad span record %q", l)
		}
		span := f[1] + " " + f[2] + " " + f[3]
		switch f[0] {
		case "start":
			events[keyOf(f[2])] = append(events[keyOf(f[2])], event{at, +1})
			open[span] = f[1]
		case "end":
			events[keyOf(f[2])] = append(events[keyOf(f[2])], event{at, -1})
			delete(open, span)
		default:
			t.Fatalf("bad span record %q", l)
		}
	}
	cut := 0
	for span, w := range open {
		died, ok := deaths[w]
		if !ok {
			t.Fatalf("handler %q never ended, and its worker was not killed", span)
		}
		id := strings.Fields(span)[1]
		events[keyOf(id)] = append(events[keyOf(id)], event{died, -1})
		cut++
	}
	over, atCap, most := 0, 0, 0
	for key, evs := range events {
		// Ends before starts at the same instant: a slot is freed before
		// it is taken again.
		slices.SortFunc(evs, func(a, b event) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.delta - b.delta
		})
		running, top := 0, 0
		for _, e := range evs {
			running += e.delta
			top = max(top, running)
		}
		most = max(most, top)
		if top > cap {
			over++
			if over <= 5 {
				t.Errorf("key %s: %d handlers at once under a cap of %d", key, top, cap)
			}
		}
		if top == cap {
			atCap++
		}
	}
	if over > 0 {
		t.Errorf("%d keys ran above their cap", over)
	}
	if atCap == 0 {
		t.Errorf("no key reached its cap of %d: this run shows nothing", cap)
	}
	if len(deaths) != 2 || cut == 0 {
		t.Errorf("%d workers killed, %d handlers cut short: the kills did not hit running jobs", len(deaths), cut)
	}

	// Every job succeeded; no slot is left taken and no job held.
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
	prefix := ns + ":{" + queue + "}:"
	for _, k := range []string{"keyrun", "keyheld"} {
		if n, err := s.rdb.Exists(s.ctx, prefix+k).Result(); err != nil || n != 0 {
			left, _ := s.rdb.HGetAll(s.ctx, prefix+k).Result()
			t.Errorf("%s left after the drain (%v): a slot leaked: %v", k, err, left)
		}
	}
	if err := s.b.SetKeyConcurrency(s.ctx, queue, "", 0); err != nil {
		t.Fatal(err)
	}
	dead := s.finish(t, []string{queue}, ns+":log", ns+":spans")
	if dead != 0 {
		t.Errorf("%d dead records", dead)
	}
	summary(t, "jobs", total, "keys", keys, "workers", 3, "kills", len(deaths), "handlers cut by a kill", cut,
		"cap per key", cap, "most of one key at once", most, "keys that reached the cap", atCap, "keys above it", over)
}
