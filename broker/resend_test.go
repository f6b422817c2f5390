package broker_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/faultproxy"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// gate holds back new connections while it is shut: a client whose
// connection was cut by a lost reply cannot send go-redis's re-send of the
// call until the test opens it, so the test decides what happens in
// between.
type gate struct {
	mu      sync.Mutex
	open    chan struct{} // closed while the gate is open
	waiting chan struct{} // gets a value when a dial waits at the shut gate
}

func newGate() *gate {
	g := &gate{open: make(chan struct{}), waiting: make(chan struct{}, 1)}
	close(g.open)
	return g
}

func (g *gate) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	default:
		select {
		case g.waiting <- struct{}{}:
		default:
		}
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// resendNS numbers the namespaces of resendBundles, which share a server.
var resendNS atomic.Uint64

// resendBundle is a broker whose client talks to a server through a fault
// proxy, with go-redis's own retries or without them, and a broker of the
// same namespace straight on the server, which plays the workers and
// operators that act while a reply is lost.
type resendBundle struct {
	ctx    context.Context
	b      *broker.Broker // through the proxy
	direct *broker.Broker // straight to the server
	rdb    *redis.Client  // straight to the server
	proxy  *faultproxy.Proxy
	gate   *gate
	runs   map[string]int // claims of each id by run
}

func newResendBundle(t *testing.T, srv *redistest.Server, retries bool) *resendBundle {
	t.Helper()
	p := faultproxy.Start(t, srv.Addr())
	g := newGate()
	// One connection: go-redis's re-send after the cut one must dial.
	opts := &redis.Options{Addr: p.Addr(), Dialer: g.dial, PoolSize: 1}
	if !retries {
		opts.MaxRetries = -1
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ns := "r" + strconv.FormatUint(resendNS.Add(1), 10)
	b, err := broker.New(c, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t)
	r := &resendBundle{ctx: context.Background(), b: b, direct: testkit.NewBroker(t, rdb, broker.Options{Namespace: ns}),
		rdb: rdb, proxy: p, gate: g, runs: map[string]int{}}
	// The server learns every script first, and queue q is known: a lost
	// reply is then the reply of the script's run (not of a NOSCRIPT
	// answer to EVALSHA, nor of the queue's registration).
	_ = r.direct.Enqueue(r.ctx, env("warm", time.Hour))
	_ = r.direct.Enqueue(r.ctx, env("warm1", time.Hour), env("warm2", time.Hour))
	_, _ = r.direct.Cancel(r.ctx, "q", "warm")
	_, _ = r.direct.RescheduleAfter(r.ctx, "q", "warm1", time.Hour)
	_ = deadletter.New(r.direct).Redrive(r.ctx, "q", 0, "warm")
	_ = deadletter.New(r.direct).Delete(r.ctx, "q", "warm")
	if _, err := r.b.Cancel(r.ctx, "q", "warm2"); err != nil {
		t.Fatal(err)
	}
	return r
}

// run claims and acks every due job of queue q, as a worker would, and
// counts the runs.
func (r *resendBundle) run(t *testing.T) {
	t.Helper()
	claimed := testkit.Claim(t, r.direct, "q", 100, time.Minute)
	for _, c := range claimed {
		r.runs[c.ID]++
		if err := testkit.Drive(r.direct).Ack(r.ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
	}
}

// kill claims the due job id and dead-letters it.
func (r *resendBundle) kill(t *testing.T, id string) {
	t.Helper()
	claimed := testkit.Claim(t, r.direct, "q", 100, time.Minute)
	if len(claimed) != 1 || claimed[0].ID != id {
		t.Fatalf("claimed %v, want %s alone", ids(claimed), id)
	}
	r.runs[id]++
	testkit.Kill(t, r.direct, claimed[0], "boom")
}

func (r *resendBundle) enqueue(t *testing.T, envs ...*job.Envelope) {
	t.Helper()
	if err := r.direct.Enqueue(r.ctx, envs...); err != nil {
		t.Fatal(err)
	}
}

// lose runs op with the reply of its first script call that names key
// lost; once the first send has run on the server and its reply is gone
// (the client found its connection cut: it dials again, or returns), it
// runs between. With go-redis's retries, op's error is what
// go-redis's re-send of the call returns, sent after between; without
// them, op's error is the *CallError of the lost reply, and lose returns
// what broker.Resend of it returns, sent after between.
func (r *resendBundle) lose(t *testing.T, retries bool, key string, op func() error, between func()) error {
	t.Helper()
	lost := r.proxy.DropReply(scripts(key))
	if retries {
		r.gate.shut()
	}
	done := make(chan error, 1)
	go func() { done <- op() }()
	if !retries {
		err := <-done
		select {
		case <-lost:
		default:
			t.Fatalf("the call returned %v, and no reply was lost", err)
		}
		var ce *broker.CallError
		if !errors.Is(err, broker.ErrOutcomeUnknown) || !errors.As(err, &ce) || ce.CallID == "" {
			t.Fatalf("lost reply without retries: %v, want a *CallError wrapping ErrOutcomeUnknown", err)
		}
		between()
		return broker.Resend(r.ctx, err)
	}
	select {
	case <-r.gate.waiting: // the reply was lost: go-redis's re-send waits for a connection
	case err := <-done:
		t.Fatalf("the call returned %v before go-redis sent it again", err)
	}
	select {
	case <-lost:
	default:
		t.Fatal("go-redis sends the call again, but no reply was lost")
	}
	between()
	r.gate.release()
	return <-done
}

// Lost replies of each call that changes jobs, answered after the job ran
// or ended: go-redis's re-send of the call, and broker.Resend without
// client retries, each get the call's first outcome, and nothing is done
// twice: a job enqueued once runs once, a cancel or a delete takes nothing
// that came after it, a redrive moves nothing again.
func TestResendAfterTheJobEnded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, retries := range []bool{true, false} {
		name := "go-redis resends"
		if !retries {
			name = "broker.Resend"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("enqueue", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				e := env("a", 0)
				err := r.lose(t, retries, testkit.Key(t, r.b, "q", "jobs"), func() error { return r.b.Enqueue(r.ctx, e) }, func() { r.run(t) })
				if err != nil || e.ReadyAt.IsZero() {
					t.Fatalf("resent enqueue after the job ran: %v, ready %v; want nil, the first outcome", err, e.ReadyAt)
				}
				r.run(t)
				if r.runs["a"] != 1 || r.rdb.HExists(r.ctx, testkit.Key(t, r.b, "q", "jobs"), "a").Val() {
					t.Fatalf("job ran %d times, stored after: %v; want once, and gone", r.runs["a"], r.rdb.HExists(r.ctx, testkit.Key(t, r.b, "q", "jobs"), "a").Val())
				}
			})
			t.Run("unique", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				forever := uniqueEnv("", 0) // not remembered after its end: a new call would store it again
				forever.Type = "forever"
				window := uniqueEnv("", time.Hour) // remembered for an hour after its end
				for _, e := range []*job.Envelope{forever, window} {
					err := r.lose(t, retries, testkit.Key(t, r.b, "q", "jobs"), func() error { return r.b.Enqueue(r.ctx, e) }, func() {
						claimed := testkit.Claim(t, r.direct, "q", 10, time.Minute)
						for _, c := range claimed {
							r.runs[c.ID]++
							ackRemember(t, r.direct, c)
						}
					})
					if err != nil {
						t.Fatalf("resent Unique enqueue after the job ran: %v, want nil, the first outcome", err)
					}
					r.run(t)
					if r.runs[e.ID] != 1 {
						t.Fatalf("Unique job %s ran %d times, want once", e.ID, r.runs[e.ID])
					}
				}
				// A new call with the content is judged on what is stored.
				again := uniqueEnv("", time.Hour)
				var dup *broker.DuplicateError
				if err := r.b.Enqueue(r.ctx, again); !errors.As(err, &dup) || !dup.Ended || dup.ID != window.ID {
					t.Fatalf("a new call with the content: %v, want a DuplicateError naming %s as ended", err, window.ID)
				}
			})
			t.Run("batch", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				r.enqueue(t, env("taken", 0)) // pending when the batch is sent
				batch := []*job.Envelope{env("b1", 0), env("taken", time.Hour), env("b2", 0)}
				err := r.lose(t, retries, testkit.Key(t, r.b, "q", "jobs"), func() error { return r.b.Enqueue(r.ctx, batch...) }, func() { r.run(t) })
				var be *job.BatchError
				if !errors.As(err, &be) || len(be.Errs) != 3 || be.Errs[0] != nil || !errors.Is(be.Errs[1], broker.ErrDuplicate) || be.Errs[2] != nil {
					t.Fatalf("resent batch after its jobs ran: %v; want the first outcome: nil, ErrDuplicate, nil", err)
				}
				r.run(t)
				for _, id := range []string{"b1", "b2", "taken"} {
					if r.runs[id] != 1 {
						t.Fatalf("job %s ran %d times, want once (runs %v)", id, r.runs[id], r.runs)
					}
				}
			})
			t.Run("enqueue under fair turns", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				if err := r.direct.SetKeyFairness(r.ctx, "q", true); err != nil {
					t.Fatal(err)
				}
				jobs := testkit.Key(t, r.b, "q", "jobs")
				heldA := strings.TrimSuffix(testkit.Key(t, r.b, "q", "controls"), "controls") + "held:#A"
				keyheld := strings.TrimSuffix(testkit.Key(t, r.b, "q", "controls"), "controls") + "keyheld"
				// Resent while the job waits for its turn: it waits once.
				a := keyed("A.1", "A")
				if err := r.lose(t, retries, jobs, func() error { return r.b.Enqueue(r.ctx, a) }, func() {}); err != nil {
					t.Fatalf("resent enqueue of a job waiting for its turn: %v, want nil", err)
				}
				if n := r.rdb.ZCard(r.ctx, heldA).Val(); n != 1 {
					t.Fatalf("A's held set holds %d jobs after the resend, want 1", n)
				}
				if n := r.rdb.ZScore(r.ctx, keyheld, "A").Val(); n != 1 {
					t.Fatalf("A counted %v held after the resend, want 1", n)
				}
				// Resent after the job ran: it runs once.
				b := keyed("A.2", "A")
				if err := r.lose(t, retries, jobs, func() error { return r.b.Enqueue(r.ctx, b) }, func() { r.run(t) }); err != nil {
					t.Fatalf("resent enqueue after the job ran: %v, want nil", err)
				}
				r.run(t)
				if r.runs["A.1"] != 1 || r.runs["A.2"] != 1 {
					t.Fatalf("runs %v, want A.1 and A.2 once each", r.runs)
				}
				if n := r.rdb.Exists(r.ctx, heldA, keyheld).Val(); n != 0 {
					t.Fatalf("%d of A's held set and the held counts left after both ran", n)
				}
			})
			t.Run("cancel", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				r.enqueue(t, env("a", time.Hour))
				err := r.lose(t, retries, testkit.Key(t, r.b, "q", "jobs"), func() error { _, err := r.b.Cancel(r.ctx, "q", "a"); return err }, func() {
					r.enqueue(t, env("a", time.Hour)) // a new job with the id, after the cancel
				})
				if err != nil {
					t.Fatalf("resent cancel of the job it cancelled: %v, want nil, not ErrNotFound", err)
				}
				if _, err := r.direct.Job(r.ctx, "q", "a"); err != nil {
					t.Fatalf("the job enqueued after the cancel: %v; the resend cancelled it", err)
				}
			})
			t.Run("reschedule", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				r.enqueue(t, env("a", time.Hour))
				err := r.lose(t, retries, testkit.Key(t, r.b, "q", "jobs"), func() error {
					_, err := r.b.RescheduleAfter(r.ctx, "q", "a", 0)
					return err
				}, func() { r.run(t) })
				if err != nil || r.runs["a"] != 1 {
					t.Fatalf("resent reschedule after the job ran: %v (runs %d); want nil, not ErrNotFound", err, r.runs["a"])
				}
			})
			t.Run("redrive", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				r.enqueue(t, env("a", 0))
				r.kill(t, "a")
				err := r.lose(t, retries, testkit.Key(t, r.b, "q", "dead"), func() error { return deadletter.New(r.b).Redrive(r.ctx, "q", 0, "a") }, func() { r.run(t) })
				if err != nil {
					t.Fatalf("resent redrive after the job ran: %v, want nil, not ErrNotFound", err)
				}
				r.run(t)
				if r.runs["a"] != 2 {
					t.Fatalf("job ran %d times, want twice (dead, then once redriven)", r.runs["a"])
				}
			})
			t.Run("dead delete", func(t *testing.T) {
				t.Parallel()
				r := newResendBundle(t, srv, retries)
				r.enqueue(t, env("a", 0))
				r.kill(t, "a")
				err := r.lose(t, retries, testkit.Key(t, r.b, "q", "dead"), func() error { return deadletter.New(r.b).Delete(r.ctx, "q", "a") }, func() {
					r.enqueue(t, env("a", 0)) // the id dies again after the delete
					r.kill(t, "a")
				})
				if err != nil {
					t.Fatalf("resent delete: %v, want nil, not ErrNotFound", err)
				}
				if _, err := deadletter.New(r.direct).Get(r.ctx, "q", "a"); err != nil {
					t.Fatalf("the dead record written after the delete: %v; the resend deleted it", err)
				}
			})
		})
	}
}

// ackRemember acks c with its Unique window, as a worker does.
func ackRemember(t *testing.T, b *broker.Broker, c protocol.Claimed) {
	t.Helper()
	res, err := testkit.Drive(b).Settle(context.Background(), protocol.Op{Kind: protocol.OpAck, Lease: c.Lease, Remember: c.Envelope.UniqueFor})
	if err != nil || res[0].Err != nil {
		t.Fatalf("ack: %v %v", err, res)
	}
}

// Two calls with one id are two calls, whatever the timing: 200 pairs of
// enqueues of the same id with different delays, each pair sent within a
// millisecond, give 200 ErrDuplicate, and the first job of each pair is
// the one stored; the same with ready times of their own, and on a queue
// of 4 shards.
func TestSameIDInOneMillisecondIsADuplicate(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		for _, at := range []bool{false, true} {
			t.Run("shards "+strconv.Itoa(shards)+" at "+strconv.FormatBool(at), func(t *testing.T) {
				t.Parallel()
				rdb, ns := redistest.New(t)
				b := testkit.NewBroker(t, rdb, broker.Options{Namespace: ns})
				ctx := context.Background()
				if shards > 1 {
					if err := b.DeclareQueue(ctx, "q", shards); err != nil {
						t.Fatal(err)
					}
				}
				typ := job.New[struct{ N int }]("pair", job.Queue("q"))
				base := time.Now().Add(time.Hour)
				dups := 0
				for i := range 200 {
					id := "p" + strconv.Itoa(i)
					opts := func(k int) []job.Option {
						if at {
							return []job.Option{job.ID(id), job.At(base.Add(time.Duration(k) * time.Minute))}
						}
						return []job.Option{job.ID(id), job.In(time.Duration(k) * time.Minute)}
					}
					first, err := typ.Enqueue(ctx, b, struct{ N int }{1}, opts(1)...)
					if err != nil {
						t.Fatal(err)
					}
					_, err = typ.Enqueue(ctx, b, struct{ N int }{1}, opts(2)...)
					var dup *broker.DuplicateError
					if errors.As(err, &dup) && dup.ID == id && !dup.Ended {
						dups++
					} else {
						t.Errorf("pair %d: second enqueue %v, want a DuplicateError naming %s", i, err, id)
					}
					j, err := b.Job(ctx, "q", id)
					if err != nil || !j.ReadyAt.Equal(first.ReadyAt) {
						t.Fatalf("pair %d: stored job %v (%v), want the first one's ready time %v", i, j, err, first.ReadyAt)
					}
				}
				if dups != 200 {
					t.Fatalf("%d of 200 second enqueues were refused", dups)
				}
			})
		}
	}
}

// Producers racing to enqueue the same job.Unique content: in each of 30
// rounds, 20 concurrent producers, exactly one gets nil (it stored the
// job) and the 19 others a DuplicateError naming it; on a plain queue and
// on one of 4 shards.
func TestConcurrentUniqueProducersOneNil(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 4} {
		t.Run("shards "+strconv.Itoa(shards), func(t *testing.T) {
			t.Parallel()
			rdb, ns := redistest.New(t)
			b := testkit.NewBroker(t, rdb, broker.Options{Namespace: ns})
			ctx := context.Background()
			if shards > 1 {
				if err := b.DeclareQueue(ctx, "q", shards); err != nil {
					t.Fatal(err)
				}
			}
			typ := job.New[struct{ Round int }]("remind", job.Queue("q"), job.Unique(time.Hour))
			for round := range 30 {
				errs := make([]error, 20)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for p := range errs {
					wg.Go(func() {
						<-start
						_, errs[p] = typ.Enqueue(ctx, b, struct{ Round int }{round})
					})
				}
				close(start)
				wg.Wait()
				want := naming.UniqueID("remind", []byte(`{"Round":`+strconv.Itoa(round)+`}`))
				nils := 0
				for p, err := range errs {
					var dup *broker.DuplicateError
					switch {
					case err == nil:
						nils++
					case errors.As(err, &dup) && dup.ID == want:
					default:
						t.Fatalf("round %d producer %d: %v, want nil or a DuplicateError naming %s", round, p, err, want)
					}
				}
				if nils != 1 {
					t.Fatalf("round %d: %d producers got nil, want exactly one", round, nils)
				}
			}
		})
	}
}

// Call records: one per script call of a batch Enqueue, one per single
// Enqueue, each living the resend window; with ResendWindow negative, none
// is kept.
func TestResendWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	b := testkit.NewBroker(t, rdb, broker.Options{Namespace: ns})
	if err := b.Enqueue(ctx, env("taken", time.Hour)); err != nil {
		t.Fatal(err)
	}
	calls := testkit.Key(t, b, "q", "jobs")
	calls = calls[:len(calls)-len("jobs")] + "c:*"
	before := len(redistest.Keys(t, rdb, calls))
	batch := []*job.Envelope{env("x", 0), env("taken", 0), env("y", time.Hour)}
	err := b.Enqueue(ctx, batch...)
	var be *job.BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], broker.ErrDuplicate) || be.Errs[2] != nil {
		t.Fatalf("batch: %v", err)
	}
	if n := len(redistest.Keys(t, rdb, calls)) - before; n != 1 {
		t.Fatalf("%d call records for a batch of 3 in one shard, want one for the call", n)
	}
	for _, id := range []string{"s1", "s2"} {
		if err := b.Enqueue(ctx, env(id, time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(redistest.Keys(t, rdb, calls)) - before; n != 3 {
		t.Fatalf("%d call records after two single enqueues more, want one each", n)
	}
	for _, k := range redistest.Keys(t, rdb, calls) {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > broker.DefaultResendWindow {
			t.Fatalf("call record %s lives %v, want at most the default window %v", k, ttl, broker.DefaultResendWindow)
		}
	}

	rdb2, ns2 := redistest.New(t)
	off := testkit.NewBroker(t, rdb2, broker.Options{Namespace: ns2, ResendWindow: -1})
	if err := off.Enqueue(ctx, env("z", 0)); err != nil {
		t.Fatal(err)
	}
	if keys := redistest.Keys(t, rdb2, ns2+":*c:*"); len(keys) != 0 {
		t.Fatalf("ResendWindow < 0 keeps call records %v", keys)
	}
}

// In durable mode, an Enqueue that the replicas did not confirm fails with
// ErrNotReplicated although the job is stored on the master; a worker runs
// and acks it meanwhile. broker.Resend, repeated until the replicas
// confirm, answers nil (the first outcome) and the job is not stored or
// run again; a new call with the same id, the old advice, would have
// stored it a second time.
func TestDurableResendAfterTheJobRan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0") // the replica syncs at once
	rdb := master.Client(t)
	port := master.Addr()[strings.LastIndexByte(master.Addr(), ':')+1:]
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", port)
	inSync := func() bool {
		info, _ := rdb.Info(ctx, "replication").Result()
		return strings.Contains(info, "state=online")
	}
	redistest.WaitFor(t, 10*time.Second, "replica in sync", inSync)
	durable := testkit.NewBroker(t, rdb, broker.Options{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	plain := testkit.NewBroker(t, rdb, broker.Options{})
	if err := plain.Enqueue(ctx, env("known", time.Hour)); err != nil {
		t.Fatal(err)
	}

	replica.Pause()
	e := env("a", 0)
	err := durable.Enqueue(ctx, e)
	var ce *broker.CallError
	if !errors.Is(err, broker.ErrNotReplicated) || !errors.As(err, &ce) || ce.ID != "a" {
		t.Fatalf("enqueue while the replica is paused: %v, want a *CallError wrapping ErrNotReplicated", err)
	}
	runs := 0
	for _, c := range testkit.Claim(t, plain, "q", 10, time.Minute) {
		runs++
		if err := testkit.Drive(plain).Ack(ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 {
		t.Fatalf("%d jobs ran on the master, want the unconfirmed one", runs)
	}
	replica.Resume()
	redistest.WaitFor(t, 30*time.Second, "the resend confirmed", func() bool {
		err = broker.Resend(ctx, err)
		if err != nil && !errors.Is(err, broker.ErrNotReplicated) {
			t.Fatalf("resend: %v, want nil or ErrNotReplicated again", err)
		}
		return err == nil
	})
	if e.ReadyAt.IsZero() {
		t.Fatal("the resend's nil left no ready time")
	}
	if got := testkit.Claim(t, plain, "q", 10, time.Minute); len(got) != 0 {
		t.Fatalf("the resend stored the job again: claimed %v", ids(got))
	}
	// A new call is judged on what is stored: the job ended, so it is a
	// new job (what retrying "with the same id" did).
	if err := plain.Enqueue(ctx, env("a", 0)); err != nil {
		t.Fatalf("a new call with the id after the job ended: %v, want it stored as a new job", err)
	}
}

// Resend sends only calls: any other error (or none) comes back as it is,
// and a CallError that no call returned has nothing to send.
func TestResendOtherErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	other := errors.New("other")
	if err := broker.Resend(ctx, other); err != other {
		t.Fatalf("Resend(other) = %v", err)
	}
	if err := broker.Resend(ctx, nil); err != nil {
		t.Fatalf("Resend(nil) = %v", err)
	}
	ce := &broker.CallError{Op: "enqueue", Err: broker.ErrOutcomeUnknown}
	if err := broker.Resend(ctx, ce); err != ce {
		t.Fatalf("Resend of a CallError no call made = %v", err)
	}
	if err := broker.Resend(ctx, &job.BatchError{Errs: []error{nil, ce}}); !errors.Is(err, broker.ErrOutcomeUnknown) {
		t.Fatalf("Resend of a batch error with such a CallError = %v", err)
	}
}
