package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// takeTrimmed is how many trimmed records one TakeTrimmed call takes: what
// a worker that dies while its hook runs loses at most.
const takeTrimmed = 16

// trimmed acts on what a Settle call of shard sh trimmed from its dead
// letters: it logs the queue's warning when the call claimed it (at most
// one a minute per queue, across the workers) and wakes
// the hook's goroutine when records were kept for it. It never waits.
func (w *Worker) trimmed(sh keyspace.Shard, res []protocol.Settled) {
	for _, r := range res {
		t := r.Trims
		if t == nil {
			continue
		}
		if t.Warn {
			e := w.log.Warn().Str("queue", sh.Queue()).Int("dead_cap", t.Cap).Int64("trimmed", t.ByCap)
			if t.Unarchived > 0 {
				e = e.Int64("unarchived", t.Unarchived)
			}
			e.Msg(fmt.Sprintf("dead letters are being trimmed: the dead-letter store of queue %q is at its cap of %d records "+
				"(broker.Options.DeadCap), so each new dead job drops the oldest record. Raise DeadCap "+
				"(deaths per second x seconds until someone looks, see docs/operations.md), or redrive or delete "+
				"the dead jobs (delayq dead ls / redrive / rm --queue %s); delayq stats counts the records trimmed "+
				"(TRIMMED), and worker.Options.OnDeadTrimmed can archive them", sh.Queue(), t.Cap, sh.Queue()))
		}
		if t.Kept > 0 && w.trimSig != nil {
			signal(w.trimSig)
		}
	}
}

// handTrimmed runs while the worker does when Options.OnDeadTrimmed is set:
// it empties the shards' lists of trimmed records into the hook, when a
// settle of this worker kept some and every ReapInterval (or MaxIdle) for
// those other workers' trims kept. It returns when ctx is done, after
// handing the records it already took.
//
// The hook's context is ctx until ctx is done, then lives ShutdownTimeout
// more, so that the records taken already can still be written.
func (w *Worker) handTrimmed(ctx context.Context) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(w.cfg.ShutdownTimeout, cancel) })
	defer stop()
	period := w.cfg.ReapInterval
	if period <= 0 {
		period = w.cfg.MaxIdle
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		w.drainTrimmed(ctx, hctx)
		select {
		case <-ctx.Done():
			return
		case <-w.trimSig:
		case <-t.C:
		}
	}
}

// drainTrimmed hands every record kept in the served shards to the hook.
func (w *Worker) drainTrimmed(ctx, hctx context.Context) {
	for _, q := range w.cfg.Queues {
		shards, err := w.b.Shards(context.WithoutCancel(ctx), q.Name)
		if err != nil {
			w.log.Error().Err(err).Str("queue", q.Name).Msg("cannot read the trimmed dead records; next round tries again")
			continue
		}
		for _, s := range shards {
			for ctx.Err() == nil {
				recs, err := w.b.TakeTrimmed(context.WithoutCancel(ctx), s, takeTrimmed)
				if err != nil {
					w.log.Error().Err(err).Str("queue", q.Name).Str("shard", s.Name()).Msg("cannot take the trimmed dead records; next round tries again")
					break
				}
				for i := range recs {
					w.callTrimmed(hctx, &recs[i])
				}
				if len(recs) < takeTrimmed {
					break
				}
			}
		}
	}
}

// callTrimmed hands one record to the hook, logging a panic.
func (w *Worker) callTrimmed(ctx context.Context, r *job.TrimmedRecord) {
	defer func() {
		if v := recover(); v != nil {
			w.log.Error().Str("queue", r.Queue).Str("job_id", r.ID).Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).
				Msg("OnDeadTrimmed panicked; the record is not handed again")
		}
	}()
	w.cfg.OnDeadTrimmed(ctx, r)
}
