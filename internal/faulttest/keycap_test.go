package faulttest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
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
	const ns, queue, keys, perKey, cap = "keycapfault", naming.DefaultQueue, 1000, 3, 2
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

	keyOf := func(id string) string { k, _, _ := strings.Cut(id, "-"); return k }
	k := killRun{bin: bin, url: "redis://" + srv.Addr() + "/0", rdb: s.rdb, b: s.b, ns: ns, queue: queue,
		delay: "30ms", drain: 120 * time.Second, group: keyOf}.run(t)

	// What ran when, per key.
	over, atCap, most := 0, 0, 0
	for key, evs := range k.events {
		top := peak(evs)
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
	// Both kills hit running handlers, and every job succeeded; no slot
	// is left taken and no job held.
	k.check(t, total)
	prefix := ns + ":{" + queue + "}:"
	if n, err := s.rdb.Exists(s.ctx, prefix+"keyheld").Result(); err != nil || n != 0 {
		t.Errorf("keyheld left after the drain (%d, %v): a job is still held", n, err)
	}
	if left := hashFields(t, s.ctx, s.rdb, prefix+"keyrun"); len(left) > 0 {
		t.Errorf("keyrun holds %v after the drain: a slot leaked", left)
	}
	if err := s.b.SetKeyConcurrency(s.ctx, queue, "", 0); err != nil {
		t.Fatal(err)
	}
	dead := s.finish(t, []string{queue}, ns+":log", ns+":spans")
	if dead != 0 {
		t.Errorf("%d dead records", dead)
	}
	summary(t, "jobs", total, "keys", keys, "workers", 3, "kills", k.kills, "handlers cut by a kill", k.cut,
		"cap per key", cap, "most of one key at once", most, "keys that reached the cap", atCap, "keys above it", over)
}
