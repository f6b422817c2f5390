package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

func combineBroker(t *testing.T) *Broker {
	t.Helper()
	rdb, ns := redistest.New(t)
	b, err := New(rdb, Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func combineEnv(id string) *job.Envelope {
	return &job.Envelope{ID: id, Queue: "q", Type: "t", Payload: []byte(`{"n":1}`), Delay: time.Hour}
}

// shardQ is the one shard of queue "q".
func (b *Broker) shardQ(t *testing.T) keyspace.Shard {
	t.Helper()
	q, err := b.route.Place(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	return q.Shards()[0]
}

func (b *Broker) stored(t *testing.T, id string) bool {
	t.Helper()
	k := b.shardQ(t).Keys()
	ok, err := b.rdb.HExists(context.Background(), k.Jobs, id).Result()
	if err != nil {
		t.Fatal(err)
	}
	inSchedule, err := b.rdb.ZScore(context.Background(), k.Scheduled, id).Result()
	if ok != (err == nil && inSchedule > 0) {
		t.Fatalf("job %s half stored: body %v, schedule %v (%v)", id, ok, inSchedule, err)
	}
	return ok
}

func TestConcurrentSingleEnqueuesAreAllStored(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	const producers, each = 32, 40
	var wg sync.WaitGroup
	errs := make(chan error, producers*each)
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				e := combineEnv(fmt.Sprintf("p%d-%d", p, i))
				if err := b.Enqueue(context.Background(), e); err != nil {
					errs <- err
				} else if e.ReadyAt.IsZero() {
					errs <- fmt.Errorf("job %s stored without ReadyAt", e.ID)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, _ := b.rdb.HLen(context.Background(), b.shardQ(t).Keys().Jobs).Result(); n != producers*each {
		t.Fatalf("%d jobs stored, want %d", n, producers*each)
	}
	wantCombiner(t, b.combinerFor(b.shardQ(t)), 0)
}

func TestConcurrentSameIDStoresOne(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	const callers = 24
	start := make(chan struct{})
	results := make(chan error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			e := combineEnv("same")
			e.Payload = fmt.Appendf(nil, `{"caller":%d}`, i) // not the same envelope
			results <- b.Enqueue(context.Background(), e)
		})
	}
	close(start)
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrDuplicate):
			t.Errorf("err = %v, want nil or ErrDuplicate", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d callers stored the same id, want 1", ok, callers)
	}
}

func TestCancelledEnqueueStoresNothing(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Enqueue(ctx, combineEnv("gone")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if b.stored(t, "gone") {
		t.Fatal("job of a cancelled call was stored")
	}
}

// TestCallsInFlightAreBounded: while fewer than maxInFlight calls to a queue
// are in flight a caller sends at once; at the bound it waits for one of
// them to end.
func TestCallsInFlightAreBounded(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	c := b.combinerFor(b.shardQ(t))
	c.mu.Lock()
	c.busy = maxInFlight - 1 // as if the other calls were in flight, for good
	c.mu.Unlock()
	if err := b.Enqueue(context.Background(), combineEnv("beside")); err != nil {
		t.Fatal(err)
	}
	if !b.stored(t, "beside") {
		t.Fatal("a caller below the bound did not send at once")
	}

	c.mu.Lock()
	c.busy = maxInFlight
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- b.Enqueue(context.Background(), combineEnv("behind")) }()
	waitWaiting(t, c, 1)
	select {
	case err := <-done:
		t.Fatalf("a caller at the bound returned (%v) while every call was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	if b.stored(t, "behind") {
		t.Fatal("a caller at the bound sent while every call was in flight")
	}
	c.mu.Lock()
	c.handOnLocked() // one of them ends
	c.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !b.stored(t, "behind") {
		t.Fatal("job not stored once a call ended")
	}
	wantCombiner(t, c, maxInFlight-1)
}

// TestWithdrawPassesTheLeadOn: a caller that gives up after the lead
// reached it, but before it took it (both ready at once), passes the lead
// to the next waiting caller; without one, the call it would have sent no
// longer counts as in flight.
func TestWithdrawPassesTheLeadOn(t *testing.T) {
	t.Parallel()
	c := &combiner{}
	p := &pendingJob{ctx: context.Background(), ch: make(chan turn, 1), led: true}
	q := &pendingJob{ctx: context.Background(), ch: make(chan turn, 1)}
	c.busy = maxInFlight
	c.waiting = []*pendingJob{p, q}
	p.ch <- turn{lead: true}
	if !c.withdraw(p) {
		t.Fatal("withdraw of a waiting caller reported it sent")
	}
	select {
	case got := <-q.ch:
		if !got.lead || !q.led {
			t.Fatalf("next caller got %+v (led %v), want the lead", got, q.led)
		}
	default:
		t.Fatal("the lead did not pass on to the next waiting caller")
	}
	if c.busy != maxInFlight || len(c.waiting) != 1 || c.waiting[0] != q {
		t.Fatalf("busy=%d waiting=%d, want %d and the next caller alone", c.busy, len(c.waiting), maxInFlight)
	}

	// Alone, a caller that gives up with the lead ends the call it would
	// have sent.
	c = &combiner{busy: maxInFlight}
	r := &pendingJob{ctx: context.Background(), ch: make(chan turn, 1), led: true}
	c.waiting = []*pendingJob{r}
	r.ch <- turn{lead: true}
	if !c.withdraw(r) {
		t.Fatal("withdraw of a waiting caller reported it sent")
	}
	wantCombiner(t, c, maxInFlight-1)
}

// TestCombinerUnderCancellations: many producers whose contexts end at
// random moments, some while their job waits, some while it is in flight
// and some as the lead reaches them. Every call returns; a job whose call
// returned nil is stored, one whose call returned the context's error is
// not; and the combiner ends with no call counted in flight and none
// waiting.
func TestCombinerUnderCancellations(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	const producers, each = 24, 30
	type outcome struct {
		id  string
		err error
	}
	out := make(chan outcome, producers*each)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("p%d-%d", p, i)
				// Deadlines of 0 to 250 µs, and every seventh call none.
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if k := (p*each + i) % 7; k < 6 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(k)*50*time.Microsecond)
				}
				out <- outcome{id, b.Enqueue(ctx, combineEnv(id))}
				cancel()
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("enqueue calls did not all return within 30 s")
	}
	close(out)
	var ok, gaveUp int
	for o := range out {
		switch {
		case o.err == nil:
			ok++
			if !b.stored(t, o.id) {
				t.Errorf("job %s: Enqueue returned nil but it is not stored", o.id)
			}
		case errors.Is(o.err, context.DeadlineExceeded):
			gaveUp++
			if b.stored(t, o.id) {
				t.Errorf("job %s: Enqueue returned %v but it is stored", o.id, o.err)
			}
		default:
			t.Errorf("job %s: %v", o.id, o.err)
		}
	}
	if ok == 0 || gaveUp == 0 {
		t.Fatalf("%d stored and %d given up: the test wants both", ok, gaveUp)
	}
	wantCombiner(t, b.combinerFor(b.shardQ(t)), 0)
}

// waitWaiting waits until n callers wait in c.
func waitWaiting(t *testing.T, c *combiner, n int) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, fmt.Sprintf("%d waiting callers", n), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waiting) == n
	})
}

func TestWaitingCallerGivesUp(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	c := b.combinerFor(b.shardQ(t))
	c.mu.Lock()
	c.busy = maxInFlight // as if as many calls as may be were in flight
	c.mu.Unlock()

	ctx1, cancel1 := context.WithCancel(context.Background())
	done1, done2 := make(chan error, 1), make(chan error, 1)
	go func() { done1 <- b.Enqueue(ctx1, combineEnv("first")) }()
	waitWaiting(t, c, 1)
	go func() { done2 <- b.Enqueue(context.Background(), combineEnv("second")) }()
	waitWaiting(t, c, 2)

	cancel1()
	if err := <-done1; !errors.Is(err, context.Canceled) {
		t.Fatalf("first: err = %v, want context.Canceled", err)
	}
	waitWaiting(t, c, 1)
	// A call in flight ends: the next waiting caller sends.
	c.mu.Lock()
	c.handOnLocked()
	c.mu.Unlock()
	if err := <-done2; err != nil {
		t.Fatalf("second: %v", err)
	}
	if b.stored(t, "first") || !b.stored(t, "second") {
		t.Fatal("want only the second job stored")
	}
	wantCombiner(t, c, maxInFlight-1) // the other calls in flight
}

// A caller that gives up just as the lead reaches it either sends (its job
// is stored and it gets nil) or passes the lead on (not stored, its
// context's error); either way the caller behind it is served.
func TestLeadPassesOnFromACallerThatGivesUp(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	c := b.combinerFor(b.shardQ(t))
	for i := range 30 {
		c.mu.Lock()
		c.busy = maxInFlight
		c.mu.Unlock()
		ctx1, cancel1 := context.WithCancel(context.Background())
		id1, id2 := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		done1, done2 := make(chan error, 1), make(chan error, 1)
		go func() { done1 <- b.Enqueue(ctx1, combineEnv(id1)) }()
		waitWaiting(t, c, 1)
		go func() { done2 <- b.Enqueue(context.Background(), combineEnv(id2)) }()
		waitWaiting(t, c, 2)
		c.mu.Lock()
		c.handOnLocked() // the lead goes to the first caller ...
		c.mu.Unlock()
		cancel1() // ... which gives up at the same moment
		err1 := <-done1
		if err1 != nil && !errors.Is(err1, context.Canceled) {
			t.Fatalf("round %d: first: %v", i, err1)
		}
		if got := b.stored(t, id1); got != (err1 == nil) {
			t.Fatalf("round %d: first returned %v but stored = %v", i, err1, got)
		}
		select {
		case err := <-done2:
			if err != nil {
				t.Fatalf("round %d: second: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the second caller was never served", i)
		}
		if !b.stored(t, id2) {
			t.Fatalf("round %d: second job not stored", i)
		}
	}
}

// One job alone takes the script's single-job path (HSETNX, then SET NX
// GET of its call record): the same call sent again (its call id) gets its
// first outcome, while the job is scheduled, once a worker has it, and
// after it ended, and stores nothing; a new call with the very envelope is
// a duplicate, as is another envelope with the id, and the duplicate's
// resend is a duplicate too, even once the id is free; a key of the wrong
// type, the call record's included, fails before anything is written.
func TestSingleEnqueuePath(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	ctx := context.Background()
	k := b.shardQ(t).Keys()
	send := func(env *job.Envelope, cid string) error {
		body, err := b.prepare(env, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b.enqueueOne(ctx, env, body, cid)
	}
	env := combineEnv("one")
	cid := callID()
	if err := send(env, cid); err != nil {
		t.Fatal(err)
	}
	first := env.ReadyAt
	again := *env
	again.ReadyAt = time.Time{}
	if err := b.Enqueue(ctx, &again); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("the very envelope in a new call: %v, want ErrDuplicate", err)
	}
	other := combineEnv("one")
	other.Payload = []byte(`{"n":2}`)
	otherCall := callID()
	if err := send(other, otherCall); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("another envelope with the id: %v, want ErrDuplicate", err)
	}
	resend := func(what string) {
		t.Helper()
		again := *env
		again.ReadyAt = time.Time{}
		if err := send(&again, cid); err != nil || !again.ReadyAt.Equal(first) {
			t.Fatalf("the call sent again, %s: %v, ready %v, want nil and %v", what, err, again.ReadyAt, first)
		}
	}
	resend("while scheduled")
	b.rdb.ZRem(ctx, k.Scheduled, "one") // as a claim does
	resend("held by a worker")
	if n := b.rdb.ZCard(ctx, k.Scheduled).Val(); n != 0 {
		t.Fatalf("a held job was scheduled again: %d scheduled", n)
	}
	b.rdb.HDel(ctx, k.Jobs, "one") // as an ack does
	resend("after it ended")
	if b.rdb.HExists(ctx, k.Jobs, "one").Val() || b.rdb.ZCard(ctx, k.Scheduled).Val() != 0 {
		t.Fatal("the call sent again after its job ended stored it again")
	}
	if err := send(other, otherCall); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("the duplicate's call sent again once the id is free: %v, want its first outcome, ErrDuplicate", err)
	}
	if b.stored(t, "one") {
		t.Fatal("a resent duplicate stored the job")
	}

	cid = callID()
	b.rdb.HSet(ctx, k.Calls+cid, "x", "y")
	if err := send(combineEnv("two"), cid); err == nil || !strings.Contains(err.Error(), k.Calls+cid) {
		t.Fatalf("call record of the wrong type: %v, want an error naming it", err)
	}
	if b.stored(t, "two") {
		t.Fatal("the job was stored although the call failed")
	}
	b.rdb.Set(ctx, k.Scheduled, "x", 0)
	if err := b.Enqueue(ctx, combineEnv("two")); err == nil || !strings.Contains(err.Error(), k.Scheduled) {
		t.Fatalf("scheduled of the wrong type: %v, want an error naming it", err)
	}
	if b.rdb.HExists(ctx, k.Jobs, "two").Val() {
		t.Fatal("the job was stored although the call failed")
	}
}

// wantCombiner fails t unless c has busy calls in flight (or handed on)
// and no caller waiting.
func wantCombiner(t *testing.T, c *combiner, busy int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy != busy || len(c.waiting) != 0 {
		t.Fatalf("combiner left busy=%d with %d waiting, want %d and none waiting", c.busy, len(c.waiting), busy)
	}
}
