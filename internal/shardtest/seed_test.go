package shardtest

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// The queues of the seed: orders is declared with 1 shard on one side and
// 3 on the other; mail is used undeclared (1 shard) on both, so that the
// readers of every queue have two to merge.
const (
	orders = "orders"
	mail   = "mail"
)

// shardCounts are the two sides' shard counts of orders.
var shardCounts = [2]int{1, 3}

// types are the job types of orders, in rotation.
var types = []string{"order.create", "order.ship", "order.refund"}

// errorsOf are the final errors of dead jobs, in rotation.
var errorsOf = []string{
	"permanent: card declined (code 51)",
	"timeout: carrier API did not answer within 10s",
	"panic: assignment to entry in nil map\ngoroutine 7 [running]:\nmain.ship(...)\n\t/app/ship.go:42",
}

// Counts of the seed in orders.
const (
	nProcessing = 55
	nDead       = 55
	nAcked      = 3
	nRetried    = 3
	nDue        = 12
	nFuture     = 60
	// scheduled: due + future + retried + one dead id enqueued again
	nScheduled = nDue + nFuture + nRetried + 1
)

// redeadID is a dead job whose id was enqueued again: Job reports the
// pending one, the dead record stays, and redriving it is a duplicate.
const redeadID = "d-03"

// Lease is the lease of the seed's claims.
const lease = time.Hour

// side is one namespace of a pair: its client, its brokers and what was
// seeded into it.
type side struct {
	name   string // "1 shard" or "3 shards"
	shards int
	rdb    redis.UniversalClient
	ns     string
	base   time.Time // the seed's time base: server time, whole seconds

	clock  atomic.Int64   // ms of the seed broker's clock
	seed   *broker.Broker // the broker that seeded, on clock
	pinned *broker.Broker // reads and changes at the pinned clock
	server *broker.Broker // reads on the server's clock
}

// pinnedNow is the pinned clock: after every seeded event, before every
// future ready time and lease deadline.
func (s *side) pinnedNow() time.Time { return s.base.Add(30 * time.Second) }

// set sets the seed broker's clock to base + d.
func (s *side) set(d time.Duration) { s.clock.Store(s.base.Add(d).UnixMilli()) }

// seedOptions vary the seed.
type seedOptions struct {
	deadCap int // broker.Options.DeadCap of every broker of the pair; 0 the default
}

// pair is the two sides, seeded alike; both share one time base.
type pair struct {
	sides [2]*side
	base  time.Time
}

// newPair seeds two fresh namespaces: orders with 1 shard in one, 3 in the
// other, and mail.
func newPair(t *testing.T, o seedOptions) *pair {
	t.Helper()
	ctx := context.Background()
	p := &pair{}
	for i, n := range shardCounts {
		rdb, ns := redistest.New(t)
		s := &side{name: fmt.Sprintf("%d shard", n), shards: n, rdb: rdb, ns: ns}
		if n > 1 {
			s.name += "s"
		}
		if i == 0 {
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			p.base = now.Truncate(time.Second)
		}
		s.base = p.base
		opts := broker.Options{Namespace: ns, DeadCap: o.deadCap}
		s.seed = testkit.NewBroker(t, rdb, opts)
		protocol.UseClock(s.seed, func() time.Time { return time.UnixMilli(s.clock.Load()) })
		s.pinned = testkit.NewBroker(t, rdb, opts)
		protocol.UseClock(s.pinned, s.pinnedNow)
		s.server = testkit.NewBroker(t, rdb, opts)
		seed(t, s)
		p.sides[i] = s
	}
	return p
}

// The seed's jobs, by the id they get.
func processingID(i int) string { return fmt.Sprintf("p-%02d", i) }
func deadID(i int) string       { return fmt.Sprintf("d-%02d", i) }
func ackedID(i int) string      { return fmt.Sprintf("a-%02d", i) }
func retriedID(i int) string    { return fmt.Sprintf("r-%02d", i) }
func dueID(i int) string        { return fmt.Sprintf("s-due-%02d", i) }
func futureID(i int) string     { return fmt.Sprintf("s-%02d", i) }

// envelope is job i of the seed: type, payload, retries, timeout and
// headers vary with i; it is created an hour before the base.
func envelope(s *side, queue, id string, i int, at time.Time) *job.Envelope {
	e := &job.Envelope{
		ID: id, Queue: queue, Type: types[i%len(types)],
		Payload:    []byte(fmt.Sprintf(`{"n":%d,"sku":"SKU-%03d","note":"<&> \u00e9"}`, i, i*7%1000)),
		MaxRetries: i % 5,
		CreatedAt:  s.base.Add(-time.Hour + time.Duration(i)*time.Second),
		At:         at,
	}
	if queue == mail {
		e.Type = "mail.send"
	}
	if i%7 == 0 {
		e.Timeout = 30 * time.Second
	}
	if i%5 == 0 {
		e.Headers = map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)}
	}
	return e
}

// seed fills one side; every step runs at a fixed instant of the seed
// broker's clock, so both sides get the same ready times, lease deadlines,
// died-at times and history minutes.
func seed(t *testing.T, s *side) {
	t.Helper()
	ctx := context.Background()
	b, d := s.seed, testkit.Drive(s.seed)
	s.set(-time.Hour)
	if err := b.DeclareQueue(ctx, orders, s.shards); err != nil {
		t.Fatal(err)
	}

	// Jobs that are claimed at once: all due, 10 s apart.
	var claimable []*job.Envelope
	add := func(queue string, n int, id func(int) string) {
		for i := range n {
			at := s.base.Add(-40*time.Minute + time.Duration(len(claimable))*10*time.Second)
			claimable = append(claimable, envelope(s, queue, id(i), len(claimable), at))
		}
	}
	add(orders, nProcessing, processingID)
	add(orders, nDead, deadID)
	add(orders, nAcked, ackedID)
	add(orders, nRetried, retriedID)
	add(mail, 1, func(int) string { return "m-p-0" })
	add(mail, 2, func(i int) string { return fmt.Sprintf("m-d-%d", i) })
	if err := b.Enqueue(ctx, claimable...); err != nil {
		t.Fatal(err)
	}
	s.set(-10 * time.Second)
	claimed := map[string]protocol.Claimed{}
	for _, q := range []string{orders, mail} {
		res, err := d.Claim(ctx, q, 1000, lease)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Jobs {
			claimed[c.ID] = c
		}
	}
	if len(claimed) != len(claimable) {
		t.Fatalf("%s: claimed %d of %d jobs", s.name, len(claimed), len(claimable))
	}

	// Dead: two at a time in one millisecond, 30 s apart, from 30 min
	// before the base; m-d-0 dies with d-00 and d-01.
	kill := func(id string, at time.Duration, i int) {
		c := claimed[id]
		s.set(at)
		rec := &job.DeadRecord{Type: c.Envelope.Type, Body: c.Body, Error: errorsOf[i%len(errorsOf)], Attempts: 1 + i%4}
		if _, err := d.Kill(ctx, c.Lease, rec); err != nil {
			t.Fatalf("%s: kill %s: %v", s.name, id, err)
		}
	}
	for i := range nDead {
		kill(deadID(i), -30*time.Minute+time.Duration(i/2)*30*time.Second, i)
	}
	kill("m-d-0", -30*time.Minute, 1)
	kill("m-d-1", -20*time.Minute, 2)

	// Acked and retried.
	s.set(-9 * time.Second)
	var acks []protocol.Lease
	for i := range nAcked {
		acks = append(acks, claimed[ackedID(i)].Lease)
	}
	if err := d.Ack(ctx, acks...); err != nil {
		t.Fatal(err)
	}
	s.set(-8 * time.Second)
	for i := range nRetried {
		c := claimed[retriedID(i)]
		e := *c.Envelope
		e.LastError = fmt.Sprintf("retry %d: upstream answered 503", i)
		if _, err := d.Retry(ctx, c.Lease, 2*time.Hour+time.Duration(i)*time.Minute, &e); err != nil {
			t.Fatal(err)
		}
	}

	// Processing: lease deadlines two at a time, a minute apart.
	s.set(-7 * time.Second)
	for i := 0; i < nProcessing; i += 2 {
		leases := []protocol.Lease{claimed[processingID(i)].Lease}
		if i+1 < nProcessing {
			leases = append(leases, claimed[processingID(i+1)].Lease)
		}
		if err := d.Extend(ctx, lease+time.Duration(i/2)*time.Minute, leases...); err != nil {
			t.Fatal(err)
		}
	}

	// Scheduled: due (three per minute), in the future (four per minute),
	// and the dead id again.
	s.set(-5 * time.Second)
	var later []*job.Envelope
	for i := range nDue {
		later = append(later, envelope(s, orders, dueID(i), i, s.base.Add(-20*time.Minute+time.Duration(i/3)*time.Minute)))
	}
	for i := range nFuture {
		later = append(later, envelope(s, orders, futureID(i), i, s.base.Add(time.Hour+time.Duration(i/4)*time.Minute)))
	}
	later = append(later, envelope(s, orders, redeadID, 99, s.base.Add(3*time.Hour)))
	for i := range 3 {
		later = append(later, envelope(s, mail, fmt.Sprintf("m-s-%d", i), i, s.base.Add(2*time.Hour+time.Duration(i)*time.Minute)))
	}
	if err := b.Enqueue(ctx, later...); err != nil {
		t.Fatal(err)
	}
	if s.shards > 1 {
		checkSpread(t, s)
	}
}

// checkSpread fails unless every shard of a sharded orders holds due,
// future, processing and dead jobs: the readers must merge all of them.
func checkSpread(t *testing.T, s *side) {
	t.Helper()
	shards := testkit.Shards(t, s.seed, orders)
	if len(shards) != s.shards {
		t.Fatalf("%s: orders has %d shards, want %d", s.name, len(shards), s.shards)
	}
	groups := map[string][]string{}
	for i := range nDue {
		groups["due"] = append(groups["due"], dueID(i))
	}
	for i := range nFuture {
		groups["future"] = append(groups["future"], futureID(i))
	}
	for i := range nProcessing {
		groups["processing"] = append(groups["processing"], processingID(i))
	}
	for i := range nDead {
		groups["dead"] = append(groups["dead"], deadID(i))
	}
	for what, ids := range groups {
		per := make([]int, len(shards))
		for _, id := range ids {
			per[keyspace.Route(shards, id).Index()]++
		}
		if slices.Contains(per, 0) {
			t.Fatalf("%s: %s jobs per shard %v: every shard must hold some", s.name, what, per)
		}
	}
}

// ids of the seed, by state, in orders.
func seededIDs() (scheduled, processing, dead []string) {
	for i := range nDue {
		scheduled = append(scheduled, dueID(i))
	}
	for i := range nFuture {
		scheduled = append(scheduled, futureID(i))
	}
	for i := range nRetried {
		scheduled = append(scheduled, retriedID(i))
	}
	scheduled = append(scheduled, redeadID)
	for i := range nProcessing {
		processing = append(processing, processingID(i))
	}
	for i := range nDead {
		dead = append(dead, deadID(i))
	}
	return scheduled, processing, dead
}

// allIDs are every id the seed used in orders, acked ones included, and one
// it never used.
func allIDs() []string {
	sch, proc, dead := seededIDs()
	out := slices.Concat(sch, proc, dead)
	for i := range nAcked {
		out = append(out, ackedID(i))
	}
	out = append(out, "never-enqueued")
	slices.Sort(out)
	return slices.Compact(out)
}

// env is one side read in one clock mode.
type env struct {
	*side
	mode mode
	b    *broker.Broker
	dl   *deadletter.Inspector
}

// mode is how a reader's clock runs.
type mode string

const (
	pinnedClock mode = "pinned" // protocol.UseClock, delayq --now
	serverClock mode = "server" // the Redis server's TIME
)

var modes = []mode{pinnedClock, serverClock}

func (s *side) in(m mode) *env {
	b := s.pinned
	if m == serverClock {
		b = s.server
	}
	return &env{side: s, mode: m, b: b, dl: deadletter.New(b)}
}

// now is the reader's notion of now: the pinned clock, or the server's.
func (e *env) now(t *testing.T) time.Time {
	t.Helper()
	if e.mode == pinnedClock {
		return e.pinnedNow()
	}
	now, err := e.rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}
