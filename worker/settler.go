package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
)

// settler records the outcomes of the jobs a worker ran (acks, retries,
// dead-lettering, releases), as many per call as have gathered (up to
// maxBatch per shard): a quiet worker records at once, a busy one amortises
// the round trip. Each call carries an id, so a call whose reply was lost is
// sent again and applied once (see protocol.Caller).
type settler struct {
	w       *Worker
	mu      sync.Mutex
	pending []settling
	sig     chan struct{} // pending grew (buffered 1)
	seq     uint64        // call ids, see next
}

// settling is an outcome waiting for the settler, and what to do once it
// is recorded: done gets the op's result, or the error that kept it from
// being recorded.
type settling struct {
	op   protocol.Op
	done func(protocol.Settled)
}

func newSettler(w *Worker) *settler { return &settler{w: w, sig: make(chan struct{}, 1)} }

// add queues an outcome.
func (s *settler) add(op protocol.Op, done func(protocol.Settled)) {
	s.mu.Lock()
	s.pending = append(s.pending, settling{op, done})
	s.mu.Unlock()
	signal(s.sig)
}

// run records queued outcomes until stop is closed; then it flushes what is
// pending.
func (s *settler) run(bg context.Context, stop <-chan struct{}) {
	for {
		var stopping bool
		select {
		case <-s.sig:
		case <-stop:
			stopping = true
		}
		for {
			s.mu.Lock()
			batch := s.pending
			s.pending = nil
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			s.flush(bg, batch)
		}
		if stopping {
			return
		}
	}
}

// flush records a batch: one call per shard and maxBatch outcomes.
func (s *settler) flush(bg context.Context, batch []settling) {
	shards := make([]keyspace.Shard, len(batch))
	for i, b := range batch {
		shards[i] = b.op.Lease.Shard
	}
	byShard := map[string][]settling{}
	var order []keyspace.Shard
	for i, b := range batch {
		name := shards[i].Name()
		if _, ok := byShard[name]; !ok {
			order = append(order, shards[i])
		}
		byShard[name] = append(byShard[name], b)
	}
	for _, sh := range order {
		items := byShard[sh.Name()]
		for start := 0; start < len(items); start += maxBatch {
			s.call(bg, sh, items[start:min(start+maxBatch, len(items))])
		}
	}
}

// next returns a new call id.
func (s *settler) next() string {
	s.seq++
	return strconv.FormatUint(s.seq, 10)
}

// call records items of shard sh in one Settle call, sent again with the
// same id after a Redis error for as long as the leases could still be
// held; then it hands each item its result.
func (s *settler) call(bg context.Context, sh keyspace.Shard, items []settling) {
	w := s.w
	ops := make([]protocol.Op, len(items))
	for i, it := range items {
		ops[i] = it.op
	}
	id := s.next()
	var res []protocol.Settled
	err := w.persist(bg, sh, "settle", func(ctx context.Context) error {
		var err error
		res, err = w.b.Settle(ctx, sh, w.caller, protocol.LaneSettle, id, ops)
		if res != nil && errors.Is(err, broker.ErrNotReplicated) {
			w.log.Warn().Err(err).Str("queue", sh.Queue()).Msg("outcomes recorded on the master, not confirmed by replicas")
			return nil
		}
		return err
	})
	for i, it := range items {
		if err != nil {
			it.done(protocol.Settled{Err: err})
			continue
		}
		it.done(res[i])
	}
	if err == nil {
		w.endBatches(bg, sh, ops, res)
	}
}

// endBatches counts the endings of batch members among ops (settled as
// res) into their batches. A failure is logged: the endings stay recorded
// in the shard, and the reaper's sweep counts them.
func (w *Worker) endBatches(bg context.Context, sh keyspace.Shard, ops []protocol.Op, res []protocol.Settled) {
	var ends []protocol.BatchEnd
	for i, op := range ops {
		if op.Batch == "" || res[i].Err != nil || (op.Kind != protocol.OpAck && op.Kind != protocol.OpKill) {
			continue
		}
		ends = append(ends, protocol.BatchEnd{ID: op.Lease.ID, Batch: op.Batch, Dead: op.Kind == protocol.OpKill})
	}
	if len(ends) == 0 {
		return
	}
	if err := w.b.EndBatch(bg, sh, ends); err != nil {
		w.log.Warn().Err(err).Str("queue", sh.Queue()).Msg("batch endings not counted yet; the sweep counts them")
	}
}

// persist runs op, retrying Redis errors with backoff for as long as the
// leases could still be held. If it never succeeds the jobs come back after
// their lease, so nothing is lost; the last error is returned.
func (w *Worker) persist(ctx context.Context, sh keyspace.Shard, what string, op func(context.Context) error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 20 * time.Millisecond
	b.MaxInterval = time.Second
	b.MaxElapsedTime = w.cfg.Lease
	err := backoff.Retry(func() error {
		err := op(ctx)
		switch {
		case errors.Is(err, protocol.ErrRefused):
			// Answered: sent again it fails the same way.
			return backoff.Permanent(err)
		case err != nil:
			w.log.Warn().Err(err).Str("queue", sh.Queue()).Msg(what + " failed; trying again")
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil {
		w.log.Warn().Err(err).Str("queue", sh.Queue()).Msg(what + " not recorded; the jobs come back after their lease")
	}
	return err
}
