package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// claims are the fetcher's claim ids and what it knows of each shard. A
// claim whose reply was lost (an error that may have come after the claim
// ran) is sent again with the same id before anything else is claimed from
// its shard: the broker replays it, so the jobs it took are not left held
// by nobody until their lease runs out. The free slots it asked for stay
// reserved meanwhile, so they are still free when its jobs arrive; other
// shards and queues go on. A shard that does not answer for most of a
// lease loses its reservation: the jobs would come too late to start. A claim that Redis answered with the script's
// own error (protocol.ErrRefused: a key of the wrong type) was not lost:
// that shard alone backs off, and is asked again later.
type claims struct {
	seq     uint64
	pending map[string]*pendingClaim // by shard name
	backoff map[string]*backingOff   // by shard name, or "queue " + name when its shards could not be resolved
}

// pendingClaim is a claim to send again.
type pendingClaim struct {
	shard    keyspace.Shard
	id       string
	n, ahead int
	sent     time.Time // when it was first sent: its leases run from no earlier
}

// backingOff is how long a shard (or queue) that failed is left alone.
type backingOff struct {
	failures int
	until    time.Time
}

// reserved is the number of slots the pending claims asked for.
func (c *claims) reserved() int {
	n := 0
	for _, p := range c.pending {
		n += p.n
	}
	return n
}

// wait returns how long until the back-off of name ends (0 when it is not
// backing off).
func (c *claims) wait(name string, now time.Time) time.Duration {
	if b := c.backoff[name]; b != nil && now.Before(b.until) {
		return b.until.Sub(now)
	}
	return 0
}

// failed starts or lengthens the back-off of name and returns it: refused
// failures (the script's own error, which only a repair ends) back off
// longer than others.
func (c *claims) failed(name string, now time.Time, refused bool) time.Duration {
	if c.backoff == nil {
		c.backoff = map[string]*backingOff{}
	}
	b := c.backoff[name]
	if b == nil {
		b = &backingOff{}
		c.backoff[name] = b
	}
	b.failures++
	d := errorBackoff(b.failures)
	if refused {
		d = refusedBackoff(b.failures)
	}
	b.until = now.Add(d)
	return d
}

// room is what a worker may claim now: run is how many of its
// Concurrency goroutines are free (negative when prefetched jobs wait for
// them), free how many jobs it may take in all (free goroutines plus what it
// may prefetch), and depth the prefetch it aims at. The slots of claims
// whose reply was lost are taken: their jobs are on their way.
type room struct{ run, free, depth int }

// room returns the room of the worker now: with no prefetch while the
// runners are starved (see slots.starved).
func (w *Worker) room() room {
	held := w.slots.count() + w.claims.reserved()
	d := 0
	if w.slots.prefetching() {
		d = w.pace.depth(w.cfg)
	}
	return room{run: w.cfg.Concurrency - held, free: w.cfg.Concurrency + d - held, depth: d}
}

// worth reports whether a claim is worth its round trip: a goroutine is
// free, or a quarter of the prefetch has started (so that claims come in
// batches of a quarter of it or more, while the three quarters still
// waiting keep the goroutines busy).
func (r room) worth() bool {
	return r.free > 0 && (r.run > 0 || r.free >= (r.depth+3)/4)
}

// fetch claims jobs for free slots until ctx is done. Each round first
// sends again the claims whose reply was lost, then visits the queues in
// the order of order() and, for a sharded queue, its shards starting at
// the next one in turn (so that claims spread over them), each asked for
// what the free slots leave; a shard (or queue) that failed is skipped
// until its back-off ends. It then sleeps until the earliest next ready
// time it was told of (at most MaxIdle), the end of a back-off, a wake-up
// notice, or a freed slot when none was free (or when a shard with a cap or
// a rate limit, from which nothing is prefetched, waits for a free
// goroutine).
func (w *Worker) fetch(ctx, jobs context.Context, notices <-chan string, handlers *sync.WaitGroup) {
	var turn int
	controlled := map[string]bool{} // shards with a cap or a rate limit, as the last claim said
	for ctx.Err() == nil {
		r := w.room()
		if len(w.claims.pending) == 0 && !r.worth() {
			select {
			case <-ctx.Done():
			case <-w.slots.freed:
			}
			continue
		}
		wait := w.cfg.MaxIdle
		var freed <-chan struct{} // set when a shard waits for a goroutine
		if !r.worth() {
			// Only lost claims to send again (their slots are reserved):
			// a freed slot lets the others claim too.
			freed = w.slots.freed
		}
		turn++
		now := time.Now()
		// First the claims whose reply was lost, each on its shard.
		for name, p := range w.claims.pending {
			if since(now, p.sent) >= w.cfg.Lease-w.cfg.Lease/10 {
				// Its jobs' leases may have run out: they would be handed
				// back on arrival. Its slots go to other shards.
				delete(w.claims.pending, name)
				w.log.Warn().Str("queue", p.shard.Queue()).Str("shard", name).Msg("a claim's reply was lost and its shard did not answer again within the lease; its jobs, if any, come back after their lease")
				continue
			}
			if d := w.claims.wait(name, now); d > 0 {
				wait = min(wait, d)
				continue
			}
			res, err := w.claim(ctx, jobs, p.shard, p.id, p.n, p.ahead, p.sent, handlers)
			switch {
			case err != nil:
				wait = min(wait, w.claims.wait(name, time.Now()))
			case len(res.Jobs) > 0:
				wait = 0
			}
		}
		if r = w.room(); !r.worth() {
			sleep(ctx, wait, notices, w.slots.freed)
			continue
		}
		for _, q := range w.order() {
			if r.free <= 0 || ctx.Err() != nil {
				break
			}
			if d := w.claims.wait("queue "+q, now); d > 0 {
				wait = min(wait, d)
				continue
			}
			shards, err := w.b.Shards(ctx, q)
			if err != nil {
				if ctx.Err() == nil {
					d := w.claims.failed("queue "+q, time.Now(), false)
					w.log.Error().Err(err).Str("queue", q).Int64("retry_in_ms", d.Milliseconds()).Msg("claim failed: cannot resolve the queue's shards; other queues go on")
					wait = min(wait, d)
				}
				continue
			}
			delete(w.claims.backoff, "queue "+q)
			for i := range shards {
				if r.free <= 0 || ctx.Err() != nil {
					break
				}
				s := shards[(turn+i)%len(shards)]
				if w.claims.pending[s.Name()] != nil {
					continue // its lost claim goes first
				}
				if d := w.claims.wait(s.Name(), now); d > 0 {
					wait = min(wait, d)
					continue
				}
				n := min(r.free, w.cfg.BatchSize)
				ahead := max(n-max(r.run, 0), 0)
				if controlled[s.Name()] {
					// Nothing is prefetched from it: claim only for free
					// goroutines, and wait for one when none is.
					if r.run <= 0 {
						freed = w.slots.freed
						continue
					}
					n, ahead = min(r.run, w.cfg.BatchSize), 0
				}
				w.claims.seq++
				res, err := w.claim(ctx, jobs, s, strconv.FormatUint(w.claims.seq, 10), n, ahead, time.Now(), handlers)
				if err != nil {
					wait = min(wait, w.claims.wait(s.Name(), time.Now()))
					r = w.room() // a lost claim's slots are reserved
					continue
				}
				controlled[s.Name()] = res.Controlled
				r.free -= len(res.Jobs)
				r.run -= len(res.Jobs)
				switch {
				case len(res.Jobs) == n:
					wait = 0 // there may be more due
				case res.Controlled && ahead > 0 && len(res.Jobs) == n-ahead:
					// What was not prefetched may be due: it waits for a
					// free goroutine.
					freed = w.slots.freed
					if res.Next.After(res.Now) {
						wait = min(wait, res.Next.Sub(res.Now))
					}
				case !res.Next.IsZero():
					wait = min(wait, max(res.Next.Sub(res.Now), 0))
				}
			}
		}
		sleep(ctx, wait, notices, freed)
	}
}

// claim sends one claim (first sent at sent: now, or the first time of a
// claim sent again) and starts its jobs. A claim that failed in a way that
// leaves it unknown whether it ran becomes its shard's pending one; one
// that was answered (even short of replicas: its jobs are handed over)
// clears it. Any failure starts the shard's back-off.
func (w *Worker) claim(ctx, jobs context.Context, s keyspace.Shard, id string, n, ahead int, sent time.Time, handlers *sync.WaitGroup) (protocol.ClaimResult, error) {
	c := w.caller
	c.Ahead = ahead
	began := time.Now()
	res, err := w.b.Claim(ctx, s, c, id, n, w.cfg.Lease)
	if err != nil && !(errors.Is(err, broker.ErrNotReplicated) && res.Now.After(time.Time{})) {
		refused := errors.Is(err, protocol.ErrRefused)
		switch {
		case errors.Is(err, job.ErrInvalid):
			// Refused before it was sent.
			delete(w.claims.pending, s.Name())
		case refused:
			// Answered: not a lost reply. Sent again, it would fail the
			// same way until the key the error names is repaired.
			delete(w.claims.pending, s.Name())
		default:
			if w.claims.pending == nil {
				w.claims.pending = map[string]*pendingClaim{}
			}
			w.claims.pending[s.Name()] = &pendingClaim{shard: s, id: id, n: n, ahead: ahead, sent: sent}
		}
		if ctx.Err() != nil {
			return res, err
		}
		d := w.claims.failed(s.Name(), time.Now(), refused)
		msg := "claim failed; sending it again before claiming more from this shard"
		if refused {
			msg = "claim refused by the script: this shard backs off until the key the error names is repaired; other queues go on"
		}
		w.log.Error().Err(err).Str("queue", s.Queue()).Str("shard", s.Name()).Int64("retry_in_ms", d.Milliseconds()).Msg(msg)
		return res, err
	}
	w.pace.claimed(time.Since(began))
	if err != nil {
		w.log.Warn().Err(err).Str("queue", s.Queue()).Msg("claim not confirmed by replicas; its jobs run anyway")
	}
	delete(w.claims.pending, s.Name())
	delete(w.claims.backoff, s.Name())
	w.claimed(jobs, s, res, sent, handlers)
	return res, nil
}

// giveBackClaim, at shutdown, asks once more for each claim whose reply was
// lost and releases the jobs it took, without spending their attempts.
func (w *Worker) giveBackClaim(bg context.Context) {
	for _, p := range w.claims.pending {
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		c := w.caller
		c.Ahead = p.ahead
		res, err := w.b.Claim(ctx, p.shard, c, p.id, p.n, w.cfg.Lease)
		cancel()
		if len(res.Jobs) == 0 {
			if err != nil && !errors.Is(err, broker.ErrNotReplicated) {
				w.log.Warn().Err(err).Str("queue", p.shard.Queue()).Msg("a claim's reply was lost; its jobs, if any, come back after their lease")
			}
			continue
		}
		leases := make([]protocol.Lease, len(res.Jobs))
		for i, c := range res.Jobs {
			leases[i] = c.Lease
		}
		w.release(leases)
	}
}

// sleep waits up to d for ctx, a wake-up notice, a freed slot (when freed
// is not nil) or the time to pass.
func sleep(ctx context.Context, d time.Duration, notices <-chan string, freed <-chan struct{}) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-notices:
	case <-freed:
	}
}

// claimed starts the jobs of one claim, first sent at sent: their leases
// are live for a lease from then.
func (w *Worker) claimed(jobs context.Context, s keyspace.Shard, res protocol.ClaimResult, sent time.Time, handlers *sync.WaitGroup) {
	if len(res.Orphans) > 0 {
		w.log.Warn().Str("queue", s.Queue()).Strs("job_ids", res.Orphans).Msg("removed scheduled ids without an envelope")
	}
	for i := range res.Jobs {
		w.start(jobs, res.Now, &res.Jobs[i], sent, handlers)
	}
	if len(res.Jobs) > 0 {
		w.log.Debug().Str("queue", s.Queue()).Str("shard", s.Name()).Int("jobs", len(res.Jobs)).Msg("jobs claimed")
	}
}

// errorBackoff is how long a shard is left alone after failures errors in
// a row: 100 ms doubling up to 2 s.
func errorBackoff(failures int) time.Duration {
	return min(50*time.Millisecond<<min(failures, 6), 2*time.Second)
}

// refusedBackoff is how long a shard whose claims the script refused
// (protocol.ErrRefused) is left alone after failures of them in a row:
// 500 ms doubling up to 10 s, so that a repaired key is found within 10 s
// and the error is logged a few times a minute.
func refusedBackoff(failures int) time.Duration {
	return min(250*time.Millisecond<<min(failures, 6), 10*time.Second)
}

// order returns the queue names in the order to try them this round.
func (w *Worker) order() []string {
	qs := w.cfg.Queues
	out := make([]string, 0, len(qs))
	if w.cfg.StrictPriority || len(qs) == 1 {
		for _, q := range qs {
			out = append(out, q.Name)
		}
		return out
	}
	// Weighted sampling without replacement (Efraimidis–Spirakis keys).
	type keyed struct {
		name string
		key  float64
	}
	ks := make([]keyed, len(qs))
	for i, q := range qs {
		ks[i] = keyed{q.Name, -rand.ExpFloat64() / float64(q.Weight)}
	}
	for len(ks) > 0 {
		best := 0
		for i := range ks {
			if ks[i].key > ks[best].key {
				best = i
			}
		}
		out = append(out, ks[best].name)
		ks = append(ks[:best], ks[best+1:]...)
	}
	return out
}

// start hands one claimed job to a runner: a parked one, else a new one
// when fewer than Concurrency run, else the job waits (prefetched) in line
// for the first runner that is done with its job. Right before it starts
// (run), its lease is checked (live for a lease from sent, the claim's, or
// from the last extend that confirmed it): a job whose lease may have run
// out meanwhile (the process was stalled, say, while it waited) is handed
// back unrun, as is one still waiting when the worker shuts down; one
// whose lease the heartbeat found lost is forgotten.
func (w *Worker) start(jobs context.Context, claimedAt time.Time, c *protocol.Claimed, sent time.Time, handlers *sync.WaitGroup) {
	ctx, cancel := context.WithCancelCause(jobs)
	t := &task{c: c, ctx: ctx, cancel: cancel, claimedAt: claimedAt, confirmed: sent}
	if w.slots.take(t, w.cfg.Concurrency) {
		handlers.Go(func() { w.slots.serve(t, w.run) })
	}
}

// run runs t on the calling runner (or, not startable, hands it back).
func (w *Worker) run(t *task) {
	defer t.cancel(nil)
	if ok, back := w.slots.startable(t, time.Now()); !ok {
		if back {
			w.giveBack([]*task{t})
		}
		return
	}
	began := time.Now()
	w.process(t)
	w.pace.handled(time.Since(began))
}

// pace measures what the adaptive prefetch is made of: how long a claim's
// round trip and a job's handling take (moving averages, ns; 0 until
// measured).
type pace struct {
	rtt, handler atomic.Int64
}

func (p *pace) claimed(d time.Duration) { ewma(&p.rtt, int64(d)) }
func (p *pace) handled(d time.Duration) { ewma(&p.handler, int64(d)) }

// ewma moves a toward v by an eighth (sets it when it is 0).
func ewma(a *atomic.Int64, v int64) {
	v = max(v, 1)
	for {
		old := a.Load()
		nv := v
		if old != 0 {
			nv = old + (v-old)/8
		}
		if a.CompareAndSwap(old, nv) {
			return
		}
	}
}

// depth is how many jobs the worker may hold beyond Concurrency now: a
// fixed Prefetch, none when it is off, else the jobs its goroutines finish
// during one claim round trip (Concurrency x round trip / handler time,
// rounded), at most maxPrefetch: so a prefetched job waits about one round
// trip for a goroutine, whatever the handlers take.
func (p *pace) depth(cfg Options) int {
	switch {
	case cfg.Prefetch > 0:
		return cfg.Prefetch
	case cfg.Prefetch < 0:
		return 0
	}
	rtt, h := p.rtt.Load(), p.handler.Load()
	if rtt == 0 || h == 0 {
		return 0
	}
	c := int64(cfg.Concurrency)
	return int(min((c*rtt+h/2)/h, maxPrefetch))
}
