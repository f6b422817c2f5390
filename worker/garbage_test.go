package worker_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

var redisInt = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)

// garbage returns 0 to 40 random bytes that are not a Redis integer.
func garbage(rng *rand.Rand) string {
	b := make([]byte, rng.IntN(41))
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	if redisInt.Match(b) {
		return "x" + string(b)
	}
	return string(b)
}

// TestRandomGarbageNeverStallsTheQueue writes random bytes, as another
// program might, into the envelopes, attempts counters and leases of some
// jobs, the queue's fencing counter, and -inf into ready times, while a
// worker runs. Each job hit in its envelope or attempts counter is
// dead-lettered with an error that says so; a garbled lease is a lost lease,
// so that job is reaped and handled again; every other job is handled; the
// worker never stops and the queue drains.
func TestRandomGarbageNeverStallsTheQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	typ := job.New[payload]("garbage", job.MaxRetries(3))
	var mu sync.Mutex
	handled := map[string]int{}
	holding := make(chan string, 10) // slow jobs report they are running
	release := make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		mu.Lock()
		handled[j.ID]++
		first := handled[j.ID] == 1
		mu.Unlock()
		if strings.HasPrefix(j.ID, "slow") && first {
			holding <- j.ID
			<-release
		}
		return nil
	})

	const n = 200
	envs := make([]*job.Envelope, 0, n)
	for i := range n {
		e, err := typ.Envelope(payload{N: i}, job.ID(fmt.Sprintf("job-%03d", i)), job.In(time.Duration(rng.IntN(300))*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if err := tb.b.Enqueue(tb.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	key := func(name string) string { return tb.key("default", name) }
	place := map[string]string{} // id -> where its garbage went
	for _, i := range rng.Perm(n)[:30] {
		id := envs[i].ID
		switch rng.IntN(3) {
		case 0:
			place[id] = "envelope"
			tb.rdb.HSet(tb.ctx, key("jobs"), id, garbage(rng))
		case 1:
			place[id] = "attempts"
			tb.rdb.HSet(tb.ctx, key("attempts"), id, garbage(rng))
		case 2:
			place[id] = "score"
			tb.rdb.ZAdd(tb.ctx, key("scheduled"), redis.Z{Score: math.Inf(-1), Member: id})
		}
	}
	tb.rdb.Set(tb.ctx, key("seq"), garbage(rng), 0)

	cfg := tb.config(t)
	cfg.Lease = 400 * time.Millisecond
	cfg.ReapInterval = 100 * time.Millisecond
	cfg.MaxIdle = 200 * time.Millisecond
	start(t, cfg)

	// Two slow jobs hold their leases while their tokens are garbled.
	for i := range 2 {
		e, err := typ.Envelope(payload{}, job.ID(fmt.Sprintf("slow-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
		id := <-holding
		place[id] = "lease"
		tb.rdb.HSet(tb.ctx, key("leases"), id, garbage(rng))
	}
	close(release)

	in := deadletter.New(tb.b)
	redistest.WaitFor(t, 30*time.Second, "every job handled or dead-lettered", func() bool {
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
		return err == nil && st.Scheduled == 0 && st.Processing == 0
	})
	for _, e := range append(envs, &job.Envelope{ID: "slow-0"}, &job.Envelope{ID: "slow-1"}) {
		mu.Lock()
		got := handled[e.ID]
		mu.Unlock()
		switch place[e.ID] {
		case "envelope", "attempts":
			r, err := in.Get(tb.ctx, "default", e.ID)
			want := map[string]string{"envelope": "corrupt envelope", "attempts": "attempts counter was not an integer"}[place[e.ID]]
			if err != nil || !strings.Contains(r.Error, want) || got != 0 {
				t.Errorf("%s (garbled %s): handled %d times, dead record %+v, %v; want dead with %q", e.ID, place[e.ID], got, r, err, want)
			}
		case "lease":
			if got != 2 {
				t.Errorf("%s (garbled lease): handled %d times, want 2 (the ack is fenced, the job reaped and handled again)", e.ID, got)
			}
		default:
			if got != 1 {
				t.Errorf("%s (garbled %q): handled %d times, want 1", e.ID, place[e.ID], got)
			}
		}
	}
	t.Logf("garbled: %v", place)
}
