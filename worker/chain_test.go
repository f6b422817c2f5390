package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

type step struct {
	Order int `json:"order"`
}

// runLog records which handler ran, with which job id, in order.
type runLog struct {
	mu   sync.Mutex
	runs []string
	ids  map[string][]string
}

func (l *runLog) add(name, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, name)
	if l.ids == nil {
		l.ids = map[string][]string{}
	}
	l.ids[name] = append(l.ids[name], id)
}

func (l *runLog) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids[name])
}

func (l *runLog) snapshot() ([]string, map[string][]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make(map[string][]string, len(l.ids))
	for k, v := range l.ids {
		ids[k] = slices.Clone(v)
	}
	return slices.Clone(l.runs), ids
}

var fastRetry = job.Retry(retry.Exponential{Initial: 10 * time.Millisecond, Multiplier: 1, Max: 10 * time.Millisecond})

// A job's next jobs run once after it succeeded, not after its failed
// attempt: those declared at enqueue (job.Then, in its queue and in
// another, one of them with a chain of its own) and those its handler
// declared (job.Next), with arguments it computed.
func TestChainRunsNextJobsOnceAfterSuccess(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var log runLog
	first := job.New[step]("chain.first", fastRetry)
	second := job.New[step]("chain.second")
	third := job.New[step]("chain.third", job.Queue("other"))
	fourth := job.New[step]("chain.fourth", job.Queue("other"))
	first.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add(fmt.Sprintf("first#%d", j.Attempt), j.ID)
		if j.Attempt == 1 {
			return errors.New("fails once")
		}
		return nil
	})
	second.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add("second", j.ID)
		env, err := fourth.Envelope(step{Order: j.Args.Order * 10})
		if err != nil {
			return err
		}
		return job.Next(ctx, env)
	})
	third.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add("third", j.ID)
		return nil
	})
	fourth.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add(fmt.Sprintf("fourth %d", j.Args.Order), j.ID)
		return nil
	})
	start(t, tb.config(t))

	thirdEnv, err := third.Envelope(step{Order: 3}, job.In(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	secondEnv, err := second.Envelope(step{Order: 2}, job.Then(thirdEnv))
	if err != nil {
		t.Fatal(err)
	}
	parent, err := first.Enqueue(tb.ctx, tb.b, step{Order: 1}, job.ID("o1"), job.Then(secondEnv))
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "the whole chain ran", func() bool {
		return log.count("third") > 0 && log.count("fourth 20") > 0
	})
	for _, q := range []string{"default", "other"} {
		redistest.WaitFor(t, 10*time.Second, "queue "+q+" empty", func() bool {
			st, err := testkit.OneStats(tb.b.Stats(tb.ctx, q))
			return err == nil && st.Scheduled == 0 && st.Processing == 0
		})
	}
	runs, ids := log.snapshot()
	for _, name := range []string{"first#1", "first#2", "second", "third", "fourth 20"} {
		if n := len(ids[name]); n != 1 {
			t.Errorf("%s ran %d times, want once (runs %v)", name, n, runs)
		}
	}
	at := func(name string) int { return slices.Index(runs, name) }
	if !(at("first#2") < at("second") && at("second") < at("third") && at("second") < at("fourth 20")) {
		t.Errorf("runs in the order %v; want each next job after its parent's success", runs)
	}
	if got, want := ids["second"][0], rules.ChainID("o1", parent.CreatedAt, 1); got != want {
		t.Errorf("the next job without an id got %q, want %q", got, want)
	}
	if third, fourth := ids["third"][0], ids["fourth 20"][0]; third == fourth || !strings.HasPrefix(third, ids["second"][0]+">") {
		t.Errorf("ids of the second's next jobs: %q and %q", third, fourth)
	}
}

// Next jobs wait for a success: a job that dies enqueues none, and the
// next jobs a failed attempt declared are forgotten.
func TestChainNothingWithoutSuccess(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var log runLog
	parent := job.New[step]("chain.parent", fastRetry)
	next := job.New[step]("chain.next")
	parent.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add(fmt.Sprintf("parent %d#%d", j.Args.Order, j.Attempt), j.ID)
		switch {
		case j.Args.Order == 1:
			return retry.Permanent(errors.New("dies"))
		case j.Attempt == 1:
			env, err := next.Envelope(step{Order: 99})
			if err != nil {
				return err
			}
			if err := job.Next(ctx, env); err != nil {
				return err
			}
			return errors.New("fails after declaring a next job")
		}
		return nil
	})
	next.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add(fmt.Sprintf("next %d", j.Args.Order), j.ID)
		return nil
	})
	start(t, tb.config(t))
	declared, err := next.Envelope(step{Order: 1})
	if err != nil {
		t.Fatal(err)
	}
	dying, err := parent.Enqueue(tb.ctx, tb.b, step{Order: 1}, job.ID("dies"), job.Then(declared))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Enqueue(tb.ctx, tb.b, step{Order: 2}, job.ID("fails-once")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "both parents ended", func() bool {
		st, err := testkit.OneStats(tb.b.Stats(tb.ctx, "default"))
		return err == nil && st.Scheduled == 0 && st.Processing == 0 && st.Dead == 1
	})
	runs, _ := log.snapshot()
	for _, r := range runs {
		if len(r) >= 4 && r[:4] == "next" {
			t.Errorf("%s ran; runs %v", r, runs)
		}
	}
	if _, err := tb.b.Job(tb.ctx, "default", rules.ChainID("dies", dying.CreatedAt, 1)); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("next job of a dead job: %v, want ErrNotFound", err)
	}
}

// dropFirstAck loses the first ack of one job, as if its worker died
// between the chain's first step and the ack: the job is left to its
// lease, and runs again.
type dropFirstAck struct {
	protocol.Broker
	id      string
	mu      sync.Mutex
	dropped bool
}

func (d *dropFirstAck) Settle(ctx context.Context, s keyspace.Shard, w protocol.Caller, lane protocol.Lane, id string, ops []protocol.Op) ([]protocol.Settled, error) {
	d.mu.Lock()
	drop := -1
	for i, op := range ops {
		if !d.dropped && op.Kind == protocol.OpAck && op.Lease.ID == d.id {
			drop, d.dropped = i, true
		}
	}
	d.mu.Unlock()
	if drop < 0 {
		return d.Broker.Settle(ctx, s, w, lane, id, ops)
	}
	rest := slices.Delete(slices.Clone(ops), drop, drop+1)
	res, err := d.Broker.Settle(ctx, s, w, lane, id, rest)
	if err != nil {
		return nil, err
	}
	lost := protocol.Settled{Err: fmt.Errorf("%w: dropped by the test", broker.ErrLeaseLost)}
	return slices.Insert(res, drop, lost), nil
}

// A worker that dies after the first step of a chain (the next jobs of
// other slots enqueued) and before the ack (which stores those of the job's
// slot) leaves the job to run again; its second success enqueues each next
// job once: the one of its own slot now, the other not again.
func TestChainAfterALostAck(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var log runLog
	parent := job.New[step]("chain.parent", fastRetry)
	here := job.New[step]("chain.here")
	there := job.New[step]("chain.there", job.Queue("other"))
	parent.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add("parent", j.ID)
		return nil
	})
	here.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add("here", j.ID)
		return nil
	})
	there.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add("there", j.ID)
		return nil
	})
	cfg := tb.config(t)
	cfg.Lease = time.Second
	cfg = tb.wrapped(t, cfg, func(p protocol.Broker) protocol.Broker { return &dropFirstAck{Broker: p, id: "p1"} })
	start(t, cfg)
	hereEnv, err := here.Envelope(step{})
	if err != nil {
		t.Fatal(err)
	}
	thereEnv, err := there.Envelope(step{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Enqueue(tb.ctx, tb.b, step{}, job.ID("p1"), job.Then(hereEnv, thereEnv)); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "the parent acked after its second run", func() bool {
		_, err := tb.b.Job(tb.ctx, "default", "p1")
		return log.count("parent") == 2 && errors.Is(err, broker.ErrNotFound)
	})
	for _, q := range []string{"default", "other"} {
		redistest.WaitFor(t, 10*time.Second, "queue "+q+" empty", func() bool {
			st, err := testkit.OneStats(tb.b.Stats(tb.ctx, q))
			return err == nil && st.Scheduled == 0 && st.Processing == 0
		})
	}
	runs, _ := log.snapshot()
	if log.count("here") != 1 || log.count("there") != 1 {
		t.Fatalf("runs %v; want each next job once", runs)
	}
}

// The next jobs of a batch member join its batch, sealed or not: the batch
// succeeds once every chain ran to its end, and a chain stopped by a dead
// step completes it without success until the step is redriven and the
// rest of its chain ran.
func TestChainInABatch(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var log runLog
	var fixed sync.Mutex
	broken := true
	first := job.New[step]("flow.first", job.Queue("a"))
	second := job.New[step]("flow.second", job.Queue("b"), job.MaxRetries(0))
	third := job.New[step]("flow.third", job.Queue("a"))
	first.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add("first", j.ID)
		env, err := second.Envelope(step{Order: j.Args.Order})
		if err != nil {
			return err
		}
		return job.Next(ctx, env)
	})
	second.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		fixed.Lock()
		fail := broken && j.Args.Order == 2
		fixed.Unlock()
		if fail {
			return errors.New("step 2 of chain 2 fails")
		}
		log.add("second", j.ID)
		env, err := third.Envelope(step{Order: j.Args.Order})
		if err != nil {
			return err
		}
		return job.Next(ctx, env)
	})
	third.Handle(tb.reg, func(ctx context.Context, j *job.Job[step]) error {
		log.add("third", j.ID)
		return nil
	})
	for _, name := range []string{"flow.done", "flow.ended"} {
		name := name
		if err := tb.reg.Table(registry.Key{}).Register(name, registry.Entry[job.Handler, retry.Policy]{Queue: "cb", Handler: job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			log.add(name, m.ID)
			return nil
		})}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, tb.config(t))
	if _, err := tb.b.CreateBatch(tb.ctx, broker.BatchSpec{ID: "flow",
		OnSuccess:  &job.Envelope{Type: "flow.done", Queue: "cb"},
		OnComplete: &job.Envelope{Type: "flow.ended", Queue: "cb"},
	}); err != nil {
		t.Fatal(err)
	}
	var members []*job.Envelope
	for i := 1; i <= 3; i++ {
		env, err := first.Envelope(step{Order: i}, job.ID(fmt.Sprintf("chain-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, env)
	}
	if err := tb.b.AddToBatch(tb.ctx, "flow", members...); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.SealBatch(tb.ctx, "flow"); err != nil {
		t.Fatal(err)
	}
	// The callback is enqueued before the batch marks it fired, so its job
	// may run first: wait for both.
	redistest.WaitFor(t, 15*time.Second, "the batch completed", func() bool {
		st, err := tb.b.Batch(tb.ctx, "flow")
		return log.count("flow.ended") > 0 && err == nil && st.CompleteFired
	})
	st, err := tb.b.Batch(tb.ctx, "flow")
	if err != nil {
		t.Fatal(err)
	}
	// chains 1 and 3: three steps each; chain 2: its first step, and its
	// second dead.
	if st.Total != 8 || st.Succeeded != 7 || st.Dead != 1 || st.SuccessFired || !st.CompleteFired {
		t.Fatalf("batch after the dead step: %+v; want 8 members, 7 succeeded, 1 dead, completed without success", *st)
	}
	if log.count("third") != 2 || log.count("flow.done") != 0 {
		runs, _ := log.snapshot()
		t.Fatalf("runs %v", runs)
	}

	fixed.Lock()
	broken = false
	fixed.Unlock()
	dead, err := tb.b.Job(tb.ctx, "b", rules.ChainID("chain-2", members[1].CreatedAt, 1))
	if err != nil || dead.State != job.StateDead {
		t.Fatalf("the dead step: %+v, %v", dead, err)
	}
	if err := deadletter.New(tb.b).Redrive(tb.ctx, "b", 0, dead.ID); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "the batch succeeded", func() bool { return log.count("flow.done") > 0 })
	if st, err = tb.b.Batch(tb.ctx, "flow"); err != nil {
		t.Fatal(err)
	}
	if st.Total != 9 || st.Succeeded != 9 || st.Dead != 0 || !st.SuccessFired {
		t.Fatalf("batch after the redrive: %+v; want 9 members, all succeeded", *st)
	}
	runs, _ := log.snapshot()
	if log.count("third") != 3 || log.count("flow.done") != 1 || log.count("flow.ended") != 1 {
		t.Fatalf("runs %v; want three third steps and each callback once", runs)
	}
	lastThird := 0
	for i, r := range runs {
		if r == "third" {
			lastThird = i
		}
	}
	if slices.Index(runs, "flow.done") < lastThird {
		t.Errorf("runs %v; want the success callback after the last step", runs)
	}
}
