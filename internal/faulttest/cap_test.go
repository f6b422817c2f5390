package faulttest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
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
	const ns, queue, total, cap = "capfault", naming.DefaultQueue, 600, 5
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

	k := killRun{bin: bin, url: "redis://" + srv.Addr() + "/0", rdb: s.rdb, b: s.b, ns: ns, queue: queue,
		delay: "60ms", drain: 90 * time.Second, group: func(string) string { return "" }}.run(t)

	// What ran when: every handler is counted together.
	events := k.events[""]
	if len(events) == 0 {
		t.Fatal("no handler ran")
	}
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
	// Both kills hit running handlers, and every job succeeded.
	k.check(t, total)
	if err := s.b.SetConcurrency(s.ctx, queue, typ.Name(), 0); err != nil {
		t.Fatal(err)
	}
	dead := s.finish(t, []string{queue}, ns+":log", ns+":spans")
	if dead != 0 {
		t.Errorf("%d dead records", dead)
	}
	summary(t, "jobs", total, "workers", 3, "kills", k.kills, "handlers cut by a kill", k.cut,
		"most running at once", most, "cap", cap, "run", span.Round(time.Millisecond),
		"time at the cap", atCap.Round(time.Millisecond), "slots busy", fmt.Sprintf("%.0f%%", 100*float64(busy)/float64(cap*span)))
}
