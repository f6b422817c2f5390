package faulttest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// TestKeyLimitsAcrossWorkers runs per-key caps and per-key rate limits
// side by side in one queue through three faultworker processes of 8
// slots, SIGKILLing one every 5 s (twice) and starting a new one each
// time: 1,000 keys capped at 2 running (3 jobs each) and 200 keys limited
// to 5 starts a second (50 jobs each), a strict window with 200 ms of
// slack for the time between a claim and its handler's start. From every
// handler's start and end records (a killed worker's handlers end at its
// death): no capped key ever has more than 2 running, no rate-limited
// key's busiest 1-s window of handler starts holds more than 5, keys
// reach their cap and their rate, every job succeeds, and at the end no
// slot, held job or waiting key is left, and the keys' windows expire.
func TestKeyLimitsAcrossWorkers(t *testing.T) {
	skipSlow(t)
	bin := buildFaultWorker(t)
	srv := startServer(t)
	const ns, queue = "keylimitfault", naming.DefaultQueue
	const capKeys, perCapKey, capN = 1000, 3, 2
	const rateKeys, perRateKey, rate = 200, 50, 5
	limit := job.RateLimit{Count: rate, Per: time.Second, Strict: true, Slack: 200 * time.Millisecond}
	s := newSuite(t, srv, ns, queue)
	typ := job.New[crashArgs]("fault.crash", job.MaxRetries(6))
	var envs []*job.Envelope
	add := func(key string, i, n int) {
		e, err := typ.Envelope(crashArgs{N: n}, job.ID(fmt.Sprintf("%s-%d", key, i)), job.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	for k := range capKeys {
		key := fmt.Sprintf("c%04d", k)
		if err := s.b.SetKeyConcurrency(s.ctx, queue, key, capN); err != nil {
			t.Fatal(err)
		}
		for i := range perCapKey {
			add(key, i, len(envs))
		}
	}
	for k := range rateKeys {
		key := fmt.Sprintf("r%03d", k)
		if err := s.b.SetKeyRateLimit(s.ctx, queue, key, limit); err != nil {
			t.Fatal(err)
		}
		for i := range perRateKey {
			add(key, i, len(envs))
		}
	}
	// Rate-limited keys' jobs first in the schedule's order, mixed with
	// the capped keys' (one enqueue call: one ready time).
	if err := s.b.Enqueue(s.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	total := len(envs)

	keyOf := func(id string) string { k, _, _ := strings.Cut(id, "-"); return k }
	k := killRun{bin: bin, url: "redis://" + srv.Addr() + "/0", rdb: s.rdb, b: s.b, ns: ns, queue: queue,
		delay: "20ms", drain: 180 * time.Second, group: keyOf, kills: 2, every: 5 * time.Second}.run(t)

	overCap, atCap, mostRunning := 0, 0, 0
	overRate, atRate, busiest := 0, 0, 0
	for key, evs := range k.events {
		switch key[0] {
		case 'c':
			top := peak(evs)
			mostRunning = max(mostRunning, top)
			if top > capN {
				overCap++
				if overCap <= 5 {
					t.Errorf("key %s: %d handlers at once under a cap of %d", key, top, capN)
				}
			}
			if top == capN {
				atCap++
			}
		case 'r':
			top := checkKeyRate(t, key, evs, rate, &overRate)
			busiest = max(busiest, top)
			if top == rate {
				atRate++
			}
		default:
			t.Fatalf("a handler of key %q, which no job has", key)
		}
	}
	if atCap == 0 {
		t.Errorf("no key reached its cap of %d: this run shows nothing", capN)
	}
	if atRate == 0 {
		t.Errorf("no key reached its rate of %d/s: this run shows nothing", rate)
	}
	k.check(t, total)

	// No slot, held job or waiting key left. The keys' strict logs expire
	// a window after their last claim: checked, then deleted, so that the
	// leak check below sees what stays.
	prefix := ns + ":{" + queue + "}:"
	for _, name := range []string{"keyheld", "keywait"} {
		if n, err := s.rdb.Exists(s.ctx, prefix+name).Result(); err != nil || n != 0 {
			t.Errorf("%s left after the drain (%d, %v)", name, n, err)
		}
	}
	if left := hashFields(t, s.ctx, s.rdb, prefix+"keyrun"); len(left) > 0 {
		t.Errorf("keyrun holds %v after the drain: a slot leaked", left)
	}
	logs := s.rdb.Keys(s.ctx, prefix+"window:#*").Val()
	for _, l := range logs {
		// PTTL -1: no expiry (a leak); -2: it expired since KEYS listed it.
		if ttl := s.rdb.PTTL(s.ctx, l).Val(); ttl == -1 || ttl > limit.Per+limit.Slack {
			t.Errorf("key log %s expires in %v, want within its window %v", l, ttl, limit.Per+limit.Slack)
		}
	}
	if len(logs) > 0 {
		if err := s.rdb.Del(s.ctx, logs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for k := range capKeys {
		if err := s.b.SetKeyConcurrency(s.ctx, queue, fmt.Sprintf("c%04d", k), 0); err != nil {
			t.Fatal(err)
		}
	}
	for k := range rateKeys {
		if err := s.b.SetKeyRateLimit(s.ctx, queue, fmt.Sprintf("r%03d", k), job.RateLimit{}); err != nil {
			t.Fatal(err)
		}
	}
	dead := s.finish(t, []string{queue}, ns+":log", ns+":spans")
	if dead != 0 {
		t.Errorf("%d dead records", dead)
	}
	summary(t, "jobs", total, "capped keys", capKeys, "rate-limited keys", rateKeys, "workers", 3, "kills", k.kills,
		"handlers cut by a kill", k.cut, "most of one capped key at once", mostRunning, "keys that reached the cap", atCap,
		"keys above it", overCap, "busiest second of one key", busiest, "keys that reached the rate", atRate, "keys above it", overRate)
}

// checkKeyRate returns the most handler starts of key in any 1-s window
// of evs (in the order killed.events keeps), and fails the test when that
// is above rate, counting such keys in over (the first five are named).
func checkKeyRate(t *testing.T, key string, evs []spanEvent, rate int, over *int) int {
	t.Helper()
	var starts []int64
	for _, e := range evs {
		if e.delta > 0 {
			starts = append(starts, e.at)
		}
	}
	top, from, j := 0, int64(0), 0
	for i := range starts {
		for starts[i]-starts[j] >= int64(time.Second) {
			j++
		}
		if n := i - j + 1; n > top {
			top, from = n, starts[j]
		}
	}
	if top > rate {
		*over++
		if *over <= 5 {
			t.Errorf("key %s: %d handler starts in the second from %s, over its %d/s", key, top, time.Unix(0, from).Format("15:04:05.000"), rate)
		}
	}
	return top
}
