package broker

import (
	"context"
	"sync"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// Single-job Enqueue calls that overlap in time share script calls: at most
// maxInFlight calls to a queue are in flight at once, and the jobs that
// arrive meanwhile wait and go together in the next call (at most
// enqueueChunk of them). A caller that finds fewer calls in flight sends at
// once, so a lone producer waits no longer than without combining; many
// concurrent producers cost Redis one request per call instead of one per
// job, which on a busy server is most of the work (each request costs more
// than the commands of a job). Two calls rather than one: while one call's
// reply is read and its callers woken, the other is on its way, so the
// producers are not held to one round trip at a time (docs/benchmarks.md
// has the figures; three measured slower than two).
//
// The caller whose job opens a call sends it, with the jobs waiting then;
// when it is done, it hands the lead to the first waiting caller not handed
// one yet, which sends what gathered meanwhile. The call runs on the
// sender's context without its cancellation, so one caller giving up does
// not fail the jobs of the others. A caller whose context ends while its job
// waits (not yet sent) gets the context's error and its job is not stored.

// combiner gathers the single-job enqueues of one physical queue (shard).
type combiner struct {
	shard   keyspace.Shard
	mu      sync.Mutex
	waiting []*pendingJob
	busy    int // calls in flight or handed to a waiting caller, at most maxInFlight
}

// maxInFlight bounds the script calls in flight per queue (shard).
const maxInFlight = 2

type pendingJob struct {
	ctx  context.Context
	env  *job.Envelope
	body []byte
	cid  string    // the call id of the job's Enqueue
	ch   chan turn // buffered 1: the result, or the lead
	led  bool      // handed the lead: it sends its own call (under mu)
}

// turn tells a waiting caller that its job is done (err) or that it sends
// the next call (lead).
type turn struct {
	lead bool
	err  error
}

func (b *Broker) combinerFor(s keyspace.Shard) *combiner {
	if c, ok := b.combiners.Load(s.Name()); ok {
		return c.(*combiner)
	}
	c, _ := b.combiners.LoadOrStore(s.Name(), &combiner{shard: s})
	return c.(*combiner)
}

// enqueueCombined stores one prepared envelope under its call id, sharing
// the script call with other callers where they overlap. Each job of a
// shared call keeps its own call id, so each is answered as its own call.
func (b *Broker) enqueueCombined(ctx context.Context, s keyspace.Shard, env *job.Envelope, body []byte, cid string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := b.combinerFor(s)
	p := &pendingJob{ctx: ctx, env: env, body: body, cid: cid, ch: make(chan turn, 1)}
	c.mu.Lock()
	c.waiting = append(c.waiting, p)
	lead := c.busy < maxInFlight
	if lead {
		c.busy++
		p.led = true
	}
	c.mu.Unlock()
	for !lead {
		select {
		case t := <-p.ch:
			if !t.lead {
				return t.err
			}
			lead = true
		case <-ctx.Done():
			if c.withdraw(p) {
				return ctx.Err()
			}
			// Already sent: the result follows.
			t := <-p.ch
			return t.err
		}
	}
	return b.sendCombined(c, p)
}

// withdraw removes p from the waiting list; it reports false when p was
// sent already. A lead handed to p passes on to the next waiting caller.
func (c *combiner) withdraw(p *pendingJob) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.waiting {
		if q != p {
			continue
		}
		c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
		select {
		case t := <-p.ch:
			if t.lead {
				c.handOnLocked()
			}
		default:
		}
		return true
	}
	return false
}

// handOnLocked gives the lead to the first waiting caller that has none,
// or ends a call.
func (c *combiner) handOnLocked() {
	for _, p := range c.waiting {
		if !p.led {
			p.led = true
			p.ch <- turn{lead: true}
			return
		}
	}
	c.busy--
}

// sendCombined sends own's job and the waiting ones in one script call,
// passes the lead on, hands each other caller its result, and returns the
// result of own. The lead passes on before the results go out, so that the
// jobs that gathered during the call are on their way while the callers of
// this one wake up.
func (b *Broker) sendCombined(c *combiner, own *pendingJob) error {
	c.mu.Lock()
	batch := c.takeLocked(own)
	c.mu.Unlock()

	envs := make([]*job.Envelope, len(batch))
	bodies := make([][]byte, len(batch))
	cids := make([]string, len(batch))
	idx := make([]int, len(batch))
	for i, p := range batch {
		envs[i], bodies[i], cids[i], idx[i] = p.env, p.body, p.cid, i
	}
	errs := make([]error, len(batch))
	if err := b.enqueueShard(context.WithoutCancel(own.ctx), c.shard, envs, bodies, cids, "", idx, errs); err != nil {
		for i := range errs {
			errs[i] = err
		}
	}
	c.mu.Lock()
	c.handOnLocked()
	c.mu.Unlock()
	var ownErr error
	for i, p := range batch {
		if p == own {
			ownErr = errs[i]
			continue
		}
		p.ch <- turn{err: errs[i]}
	}
	return ownErr
}

// takeLocked removes from the waiting list and returns own and the jobs
// that go with it: those of callers that do not lead a call of their own,
// up to enqueueChunk in all. A waiting caller whose context ended gets its
// error instead.
func (c *combiner) takeLocked(own *pendingJob) []*pendingJob {
	if len(c.waiting) == 1 && c.waiting[0] == own {
		// Alone (the common case of a single producer): no copies.
		batch := c.waiting[:1:1]
		c.waiting = nil
		return batch
	}
	batch := make([]*pendingJob, 1, min(len(c.waiting), enqueueChunk))
	batch[0] = own
	var rest []*pendingJob
	for _, p := range c.waiting {
		switch {
		case p == own:
		case p.led || len(batch) == enqueueChunk:
			rest = append(rest, p)
		case p.ctx.Err() != nil:
			p.ch <- turn{err: p.ctx.Err()} // gave up before it was sent
		default:
			batch = append(batch, p)
		}
	}
	c.waiting = rest
	return batch
}
