package worker

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
)

// fetch claims jobs for free slots until ctx is done. Each round visits
// the queues in the order of order() and, for a sharded queue, its shards
// starting at the next one in turn (so that claims spread over them), each
// asked for what the free slots leave. It then sleeps until the earliest
// next ready time it was told of (at most MaxIdle), a wake-up notice, or a
// freed slot when none was free.
func (w *Worker) fetch(ctx, jobs context.Context, notices <-chan string, handlers *sync.WaitGroup) {
	var failures int
	var turn int
	for ctx.Err() == nil {
		free := w.slots.available()
		if free == 0 {
			select {
			case <-ctx.Done():
			case <-w.slots.freed:
			}
			continue
		}
		wait := w.cfg.MaxIdle
		turn++
		for _, q := range w.order() {
			if free == 0 || ctx.Err() != nil {
				break
			}
			shards, err := w.b.Shards(ctx, q)
			if err != nil {
				if ctx.Err() == nil {
					failures++
					w.log.Error().Err(err).Str("queue", q).Msg("claim failed")
					wait = min(wait, errorBackoff(failures))
				}
				continue
			}
			for i := range shards {
				if free == 0 || ctx.Err() != nil {
					break
				}
				s := shards[(turn+i)%len(shards)]
				n := min(free, w.cfg.BatchSize)
				res, err := w.b.Claim(ctx, s, n, w.cfg.Lease)
				if err != nil {
					if ctx.Err() == nil {
						failures++
						w.log.Error().Err(err).Str("queue", q).Str("shard", s.Name()).Msg("claim failed")
						wait = min(wait, errorBackoff(failures))
					}
					continue
				}
				failures = 0
				w.claimed(jobs, s, res, handlers)
				free -= len(res.Jobs)
				switch {
				case len(res.Jobs) == n:
					wait = 0 // there may be more due
				case !res.Next.IsZero():
					wait = min(wait, max(res.Next.Sub(res.Now), 0))
				}
			}
		}
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-notices:
		}
		t.Stop()
	}
}

// claimed starts the jobs of one claim.
func (w *Worker) claimed(jobs context.Context, s keyspace.Shard, res protocol.ClaimResult, handlers *sync.WaitGroup) {
	if len(res.Orphans) > 0 {
		w.log.Warn().Str("queue", s.Queue()).Strs("job_ids", res.Orphans).Msg("removed scheduled ids without an envelope")
	}
	for i := range res.Jobs {
		w.start(jobs, res.Now, &res.Jobs[i], handlers)
	}
}

func errorBackoff(failures int) time.Duration {
	return min(50*time.Millisecond<<min(failures, 6), 2*time.Second)
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

// start runs one claimed job in a goroutine of its own.
func (w *Worker) start(jobs context.Context, claimedAt time.Time, c *protocol.Claimed, handlers *sync.WaitGroup) {
	ctx, cancel := context.WithCancelCause(jobs)
	t := &task{lease: c.Lease, cancel: cancel}
	w.slots.take(t)
	handlers.Go(func() {
		defer cancel(nil)
		w.process(ctx, claimedAt, c, t)
	})
}
