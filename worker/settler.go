package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
)

// settler records the outcomes of the jobs a worker ran (acks, retries,
// dead-lettering, releases), as many per call as have gathered (up to
// maxBatch): a quiet worker records at once, a busy one amortises the round
// trip. It has one lane per shard, each a goroutine with one call in flight
// at a time (the broker keeps one record per worker, shard and lane for a
// replay), so a slow or failing shard (a Cluster master that hangs for a
// lease) delays the outcomes of no other shard or queue. Each call carries
// an id, so a call whose reply was lost is sent again and applied once
// (see protocol.Caller).
type settler struct {
	w     *Worker
	mu    sync.Mutex
	lanes map[string]*settleLane // by shard name
	bg    context.Context
	stop  <-chan struct{}
	done  bool // stopped: outcomes added now are not recorded
	wg    sync.WaitGroup
	seq   atomic.Uint64 // call ids, see next
}

// settleLane is the outcomes of one shard waiting for its goroutine: ops,
// and what follows the recording of each (ends). The goroutine takes them
// whole and passes them to Settle as they are; once recorded, their
// buffers come back as spares, so that a lane in use allocates nothing per
// outcome.
type settleLane struct {
	shard     keyspace.Shard
	mu        sync.Mutex
	ops       []protocol.Op
	ends      []settling
	spareOps  []protocol.Op
	spareEnds []settling
	sig       chan struct{} // ops grew (buffered 1)
}

// settling is what follows the recording of an outcome (Worker.ended): t is
// the task whose outcome or release it is (nil for a lease without one);
// release marks a release; then, when not nil, runs once the outcome of t
// is recorded (or could not be).
type settling struct {
	t       *task
	release bool
	then    func(protocol.Settled)
}

func newSettler(w *Worker) *settler { return &settler{w: w, lanes: map[string]*settleLane{}} }

// start lets lanes record with bg until stop is closed; then each flushes
// what is pending and ends.
func (s *settler) start(bg context.Context, stop <-chan struct{}) {
	s.mu.Lock()
	s.bg, s.stop = bg, stop
	s.mu.Unlock()
}

// wait waits for the lanes to end, after stop was closed; outcomes added
// from then on are not recorded (their jobs come back after their lease).
func (s *settler) wait() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.wg.Wait()
}

// errStopped is the result of an outcome added after the worker stopped.
var errStopped = errors.New("worker: stopped before the outcome could be recorded; the job comes back after its lease")

// add queues a copy of op in its shard's lane, starting the lane's
// goroutine on its first outcome; e follows its recording.
func (s *settler) add(op *protocol.Op, e settling) {
	s.mu.Lock()
	if s.done || s.bg == nil {
		s.mu.Unlock()
		s.w.ended(op, e, protocol.Settled{Err: errStopped})
		return
	}
	l := s.lanes[op.Lease.Shard.Name()]
	if l == nil {
		l = &settleLane{shard: op.Lease.Shard, sig: make(chan struct{}, 1)}
		s.lanes[l.shard.Name()] = l
		s.wg.Go(func() { s.run(l) })
	}
	s.mu.Unlock()
	l.mu.Lock()
	l.ops = append(l.ops, *op)
	l.ends = append(l.ends, e)
	l.mu.Unlock()
	signal(l.sig)
}

// run records the outcomes of lane l until stop is closed; then it
// flushes what is pending.
func (s *settler) run(l *settleLane) {
	for {
		var stopping bool
		select {
		case <-l.sig:
		case <-s.stop:
			stopping = true
		}
		for {
			l.mu.Lock()
			ops, ends := l.ops, l.ends
			if len(ops) > 0 {
				l.ops, l.ends = l.spareOps[:0], l.spareEnds[:0]
				l.spareOps, l.spareEnds = nil, nil
			}
			l.mu.Unlock()
			if len(ops) == 0 {
				break
			}
			for start := 0; start < len(ops); start += maxBatch {
				end := min(start+maxBatch, len(ops))
				s.call(s.bg, &l.shard, ops[start:end], ends[start:end])
			}
			// Settle keeps nothing of ops: the buffers are spares again,
			// holding no job.
			clear(ops)
			clear(ends)
			l.mu.Lock()
			l.spareOps, l.spareEnds = ops[:0], ends[:0]
			l.mu.Unlock()
		}
		if stopping {
			return
		}
	}
}

// next returns a new call id.
func (s *settler) next() string {
	return strconv.FormatUint(s.seq.Add(1), 10)
}

// call records ops of shard sh in one Settle call, sent again with the
// same id after a Redis error for as long as the leases could still be
// held; then it hands each its result (Worker.ended, with ends[i]).
func (s *settler) call(bg context.Context, sh *keyspace.Shard, ops []protocol.Op, ends []settling) {
	w := s.w
	id := s.next()
	var res []protocol.Settled
	err := w.persist(bg, sh, "settle", func(ctx context.Context) error {
		var err error
		res, err = w.b.Settle(ctx, *sh, w.caller, protocol.LaneSettle, id, ops)
		if res != nil && errors.Is(err, broker.ErrNotReplicated) {
			w.log.Warn().Err(err).Str("queue", sh.Queue()).Msg("outcomes recorded on the master, not confirmed by replicas")
			return nil
		}
		return err
	})
	for i := range ops {
		if err != nil {
			w.ended(&ops[i], ends[i], protocol.Settled{Err: err})
			continue
		}
		w.ended(&ops[i], ends[i], res[i])
	}
	if err == nil {
		w.trimmed(*sh, res)
		w.endBatches(bg, *sh, ops, res)
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
	if err := w.b.EndBatch(w.callbackCtx(bg), sh, ends); err != nil {
		w.log.Warn().Err(err).Str("queue", sh.Queue()).Msg("batch endings not counted yet; the sweep counts them")
	}
}

// persist runs op, retrying Redis errors with backoff for as long as the
// leases could still be held. If it never succeeds the jobs come back after
// their lease, so nothing is lost; the last error is returned.
func (w *Worker) persist(ctx context.Context, sh *keyspace.Shard, what string, op func(context.Context) error) error {
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
