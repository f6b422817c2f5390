package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// TestRegisterListDeregister: a registration is listed with what it
// recorded, by the server's clock; Update shows at the next beat;
// Deregister removes it at once.
func TestRegisterListDeregister(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	held := []fleet.HeldJob{{Queue: "orders", ID: "o-1"}, {Queue: "orders", ID: "o-2"}}
	reg, err := fleetreg.New(rdb, ns, fleet.Process{
		Role:   fleet.RoleWorker,
		Queues: []fleet.Queue{{Name: "orders", Concurrency: 8}},
		Types:  []string{"order.ship"},
	}, fleetreg.Options{TTL: time.Minute, Held: func() []fleet.HeldJob { return held }})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := fleet.List(ctx, rdb, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Processes) != 1 {
		t.Fatalf("listed %d processes, want 1: %+v", len(snap.Processes), snap.Processes)
	}
	p := snap.Processes[0]
	if p.ID != reg.ID() || p.Role != fleet.RoleWorker || p.PID == 0 || p.Host == "" || p.Version == "" ||
		p.Held != 2 || len(p.HeldJobs) != 2 || p.TTL != time.Minute || p.Started.IsZero() || p.Seen.Before(p.Started) {
		t.Fatalf("listed %+v", p)
	}
	if d := snap.Now.Sub(p.Seen); d < 0 || d > 10*time.Second {
		t.Errorf("seen %s, server now %s: not the server's clock", p.Seen, snap.Now)
	}
	if !p.Expires.Equal(p.Seen.Add(p.TTL)) {
		t.Errorf("expires %s, want seen %s + ttl %s", p.Expires, p.Seen, p.TTL)
	}
	if len(snap.Serving("orders")) != 1 || len(snap.Serving("mail")) != 0 {
		t.Errorf("Serving(orders) %v, Serving(mail) %v", snap.Serving("orders"), snap.Serving("mail"))
	}

	reg.Update(func(p *fleet.Process) { p.Queues = append(p.Queues, fleet.Queue{Name: "mail"}); p.ID = "changed" })
	if err := reg.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	snap, _ = fleet.List(ctx, rdb, ns)
	if len(snap.Processes) != 1 || len(snap.Serving("mail")) != 1 || snap.Processes[0].ID != reg.ID() || !snap.Processes[0].Started.Equal(p.Started) {
		t.Fatalf("after Update: %+v", snap.Processes)
	}

	if err := reg.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	snap, _ = fleet.List(ctx, rdb, ns)
	if len(snap.Processes) != 0 {
		t.Fatalf("listed after Deregister: %+v", snap.Processes)
	}
	k := keyspace.Fleet(ns)
	if n := rdb.Exists(ctx, k.Index, k.Proc+reg.ID()).Val(); n != 0 {
		t.Errorf("%d registry keys left after Deregister", n)
	}
}

// TestExpiry: a process that stops beating is listed until its TTL after
// its last beat and then not, and the next beat of another process drops
// it from the index, so the index holds only live processes and what
// expired since the last beat.
func TestExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	gone, err := fleetreg.New(rdb, ns, fleet.Process{Role: fleet.RoleScheduler}, fleetreg.Options{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	live, err := fleetreg.New(rdb, ns, fleet.Process{Role: fleet.RoleRelay}, fleetreg.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := live.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	snap, _ := fleet.List(ctx, rdb, ns)
	if len(snap.Processes) != 2 {
		t.Fatalf("listed %d, want 2", len(snap.Processes))
	}
	last := snap.Processes[1].Seen // by role: outbox-relay, scheduler
	redistest.WaitFor(t, 30*time.Second, "the silent process drops out", func() bool {
		s, err := fleet.List(ctx, rdb, ns)
		return err == nil && len(s.Processes) == 1 && s.Processes[0].ID == live.ID()
	})
	if now := rdb.Time(ctx).Val(); now.Sub(last) < 300*time.Millisecond {
		t.Fatalf("dropped out %s after its last beat, before its TTL", now.Sub(last))
	}
	if err := live.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := rdb.ZRange(ctx, keyspace.Fleet(ns).Index, 0, -1).Val(); len(ids) != 1 || ids[0] != live.ID() {
		t.Fatalf("index after a beat: %v, want only %s", ids, live.ID())
	}
}

// TestRun: Run registers at once, beats, and deregisters when its context
// ends.
func TestRun(t *testing.T) {
	t.Parallel()
	rdb, ns := redistest.New(t)
	var beatErrs []error
	reg, err := fleetreg.New(rdb, ns, fleet.Process{Role: "mailer"}, fleetreg.Options{TTL: 300 * time.Millisecond, OnError: func(err error) { beatErrs = append(beatErrs, err) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx) }()
	var first time.Time
	redistest.WaitFor(t, 30*time.Second, "registered", func() bool {
		s, _ := fleet.List(context.Background(), rdb, ns)
		if len(s.Processes) == 1 {
			first = s.Processes[0].Seen
		}
		return len(s.Processes) == 1
	})
	redistest.WaitFor(t, 30*time.Second, "a second beat", func() bool {
		s, _ := fleet.List(context.Background(), rdb, ns)
		return len(s.Processes) == 1 && s.Processes[0].Seen.After(first)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s, _ := fleet.List(context.Background(), rdb, ns); len(s.Processes) != 0 {
		t.Fatalf("listed after Run returned: %+v", s.Processes)
	}
	if len(beatErrs) != 0 {
		t.Fatalf("beat errors: %v", beatErrs)
	}
}

// TestBadInput: bad input is refused with an error wrapping ErrInvalid,
// and nothing is stored.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	for name, c := range map[string]struct {
		ns   string
		p    fleet.Process
		opts fleetreg.Options
	}{
		"no role":       {ns: ns},
		"short ttl":     {ns: ns, p: fleet.Process{Role: "w"}, opts: fleetreg.Options{TTL: time.Millisecond}},
		"bad namespace": {ns: "a b", p: fleet.Process{Role: "w"}},
		"control chars": {ns: ns, p: fleet.Process{Role: "w\x1b[2J"}},
		"long host":     {ns: ns, p: fleet.Process{Role: "w", Host: fmt.Sprintf("%0300d", 1)}},
	} {
		if _, err := fleetreg.New(rdb, c.ns, c.p, c.opts); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if _, err := fleetreg.New(nil, ns, fleet.Process{Role: "w"}, fleetreg.Options{}); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := fleet.List(ctx, rdb, "a b"); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("List with a bad namespace: %v", err)
	}
	if n := rdb.Exists(ctx, keyspace.Fleet(ns).Index).Val(); n != 0 {
		t.Errorf("bad input stored something")
	}
}

// TestNothingOutlivesTheLastProcess: the index expires with the latest
// registration it holds, so once the last process stopped beating (as a
// SIGKILLed one does) and its TTL passed, no key of the registry is left;
// a process with a short TTL does not shorten the index below a longer
// registration another process holds.
func TestNothingOutlivesTheLastProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	k := keyspace.Fleet(ns)
	beat := func(ttl time.Duration) *fleetreg.Registration {
		t.Helper()
		reg, err := fleetreg.New(rdb, ns, fleet.Process{Role: fleet.RoleWorker}, fleetreg.Options{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		return reg
	}

	long := beat(time.Minute)
	beat(200 * time.Millisecond)
	if d := rdb.PTTL(ctx, k.Index).Val(); d < 30*time.Second {
		t.Fatalf("index expires in %s after a short registration beat beside a 1-minute one", d)
	}
	if err := long.Deregister(ctx); err != nil {
		t.Fatal(err)
	}

	// Two processes beat and are then killed: nothing is left after their TTL.
	beat(200 * time.Millisecond)
	beat(300 * time.Millisecond)
	last := rdb.Time(ctx).Val()
	if d := rdb.PTTL(ctx, k.Index).Val(); d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("index expires in %s, want the latest registration's 300ms", d)
	}
	left := func() []string {
		keys, err := rdb.Keys(ctx, ns+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	redistest.WaitFor(t, 30*time.Second, "no registry key left", func() bool { return len(left()) == 0 })
	if gone := rdb.Time(ctx).Val().Sub(last); gone < 200*time.Millisecond {
		t.Fatalf("the registry was gone %s after the last beat, before the TTLs ran out", gone)
	}
}

// TestUnreadableRecordHidesNoOther: a record that is not a process's JSON,
// and one of another type, are named in Snapshot.Unreadable with why;
// List still lists the live process beside them.
func TestUnreadableRecordHidesNoOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, ns := redistest.New(t)
	var regs []*fleetreg.Registration
	for range 3 {
		reg, err := fleetreg.New(rdb, ns, fleet.Process{Role: fleet.RoleWorker}, fleetreg.Options{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	k := keyspace.Fleet(ns)
	if err := rdb.Set(ctx, k.Proc+regs[0].ID(), "{not json", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, k.Proc+regs[1].ID()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k.Proc+regs[1].ID(), "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	snap, err := fleet.List(ctx, rdb, ns)
	if err != nil {
		t.Fatalf("List beside unreadable records: %v", err)
	}
	if len(snap.Processes) != 1 || snap.Processes[0].ID != regs[2].ID() {
		t.Errorf("listed %+v, want only %s", snap.Processes, regs[2].ID())
	}
	if len(snap.Unreadable) != 2 {
		t.Fatalf("Unreadable = %q, want the two bad records", snap.Unreadable)
	}
	for _, want := range []string{k.Proc + regs[0].ID() + ": does not decode", k.Proc + regs[1].ID() + ": WRONGTYPE"} {
		found := false
		for _, u := range snap.Unreadable {
			found = found || strings.HasPrefix(u, want)
		}
		if !found {
			t.Errorf("Unreadable = %q, want one starting %q", snap.Unreadable, want)
		}
	}
}

// goneBeforeGets holds back the first pipeline of GETs of rec until rec
// has run out on the server (polled with check), as if the server had
// been slow between List's read of the clock and its read of the records.
type goneBeforeGets struct {
	check *redis.Client
	rec   string
	fired chan struct{}
}

func (h *goneBeforeGets) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *goneBeforeGets) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *goneBeforeGets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "get" && len(c.Args()) == 2 && c.Args()[1] == h.rec {
				select {
				case <-h.fired:
				default:
					close(h.fired)
					for h.check.Exists(ctx, h.rec).Val() == 1 {
						time.Sleep(5 * time.Millisecond)
					}
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestListWhileARegistrationRunsOut: a registration that runs out between
// List's read of the clock and its read of the records is left out, and
// the snapshot's time is then no earlier than its expiry, so a process
// never drops out of a snapshot whose time is within its TTL after its
// last beat (what `delayq workers ls` relies on after a SIGKILL).
func TestListWhileARegistrationRunsOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const ns = "runout"
	const ttl = time.Second
	reg, err := fleetreg.New(rdb, ns, fleet.Process{Role: fleet.RoleScheduler}, fleetreg.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		if err := reg.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		before, err := fleet.List(ctx, rdb, ns)
		if err != nil || len(before.Processes) != 1 {
			t.Fatalf("listed %+v, %v; want the process", before, err)
		}
		seen := before.Processes[0].Seen
		h := &goneBeforeGets{check: rdb, rec: keyspace.Fleet(ns).Proc + reg.ID(), fired: make(chan struct{})}
		slow := srv.Client(t)
		slow.AddHook(h)
		snap, err := fleet.List(ctx, slow, ns)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.fired:
		default:
			// The clock was read after the expiry: nothing to read.
			if attempt == 5 {
				t.Fatal("in 5 attempts List never read the record before it ran out")
			}
			continue
		}
		if len(snap.Processes) != 0 {
			t.Fatalf("listed %+v after its registration ran out", snap.Processes)
		}
		if snap.Now.Before(seen.Add(ttl)) {
			t.Fatalf("snapshot at %s leaves out a process seen at %s with a TTL of %s", snap.Now, seen, ttl)
		}
		return
	}
}
