package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// The worker's side of the broker (internal/protocol): package worker gets
// it with protocol.For(b). It is not part of Broker's API, so that it can
// change with the worker without breaking users.

func init() {
	protocol.Install(func(v any) (protocol.Broker, bool) {
		b, ok := v.(*Broker)
		if !ok || b == nil {
			return nil, false
		}
		return workerSide{b}, true
	})
}

// workerSide implements protocol.Broker.
type workerSide struct{ b *Broker }

var _ protocol.Broker = workerSide{}

func (w workerSide) Shards(ctx context.Context, queue string) ([]keyspace.Shard, error) {
	q, err := w.b.queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	return q.Shards(), nil
}

func tokenArg(token int64) string { return strconv.FormatInt(token, 10) }

func (w workerSide) Claim(ctx context.Context, s keyspace.Shard, n int, lease time.Duration) (protocol.ClaimResult, error) {
	if lease <= 0 {
		return protocol.ClaimResult{}, fmt.Errorf("broker: %w: lease %s must be positive", job.ErrInvalid, lease)
	}
	k := s.Keys()
	res, err := w.b.run(ctx, claimScript, []string{k.Scheduled, k.Processing, k.Jobs, k.Attempts, k.Leases, k.Seq, k.Hist}, n, durMS(lease))
	if err != nil {
		return protocol.ClaimResult{}, queueErr(s.Queue(), err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 4 {
		return protocol.ClaimResult{}, fmt.Errorf("broker: claim: unexpected reply %v", res)
	}
	now, _ := parts[0].(int64)
	next, _ := parts[1].(int64)
	out := protocol.ClaimResult{Now: fromMS(now)}
	if next >= 0 {
		out.Next = fromMS(next)
	}
	if out.Jobs, err = decodeClaimed(s, parts[2]); err != nil {
		return protocol.ClaimResult{}, err
	}
	out.Orphans, err = strs(parts[3])
	return out, err
}

// decodeClaimed parses the flat id, token, attempt, time, body list that
// claim and reap return.
func decodeClaimed(s keyspace.Shard, v any) ([]protocol.Claimed, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%5 != 0 {
		return nil, fmt.Errorf("broker: unexpected job list %v", v)
	}
	queue := s.Queue()
	out := make([]protocol.Claimed, 0, len(flat)/5)
	for i := 0; i < len(flat); i += 5 {
		id, _ := flat[i].(string)
		token, _ := flat[i+1].(int64)
		attempt, _ := flat[i+2].(int64)
		at, _ := flat[i+3].(int64)
		body, _ := flat[i+4].(string)
		c := protocol.Claimed{
			Lease:   protocol.Lease{Shard: s, ID: id, Token: token},
			Attempt: int(attempt),
			ReadyAt: fromMS(at),
			Body:    []byte(body),
		}
		if attempt < 0 {
			// The script found garbage in the attempts counter and reset it.
			c.Attempt = 1
			c.Err = fmt.Errorf("job %q in queue %q: %w: its attempts counter was not an integer", id, queue, job.ErrCorrupt)
			out = append(out, c)
			continue
		}
		env, err := job.Decode(c.Body)
		if err != nil {
			c.Err = fmt.Errorf("job %q in queue %q: %w", id, queue, err)
		} else {
			env.ID, env.Queue, env.ReadyAt = id, queue, c.ReadyAt
			c.Envelope = env
		}
		out = append(out, c)
	}
	return out, nil
}

func (w workerSide) Ack(ctx context.Context, leases ...protocol.Lease) error {
	return w.b.perLease(ctx, leases, func(k keyspace.Keys) []string {
		return []string{k.Processing, k.Jobs, k.Attempts, k.Leases, k.Hist}
	}, ackScript, nil)
}

func (w workerSide) Extend(ctx context.Context, lease time.Duration, leases ...protocol.Lease) error {
	if lease <= 0 {
		return fmt.Errorf("broker: %w: lease %s must be positive", job.ErrInvalid, lease)
	}
	return w.b.perLease(ctx, leases, func(k keyspace.Keys) []string {
		return []string{k.Processing, k.Leases}
	}, extendScript, func(keyspace.Keys) []any { return []any{durMS(lease)} })
}

func (w workerSide) Release(ctx context.Context, leases ...protocol.Lease) error {
	return w.b.perLease(ctx, leases, func(k keyspace.Keys) []string {
		return []string{k.Scheduled, k.Processing, k.Attempts, k.Leases}
	}, releaseScript, func(k keyspace.Keys) []any { return []any{k.Wake} })
}

// perLease runs a batch script over leases grouped by shard. The script
// takes the fixed args then id, token pairs and returns 1 or 0 per pair. It
// returns nil or a *job.BatchError aligned with leases.
func (b *Broker) perLease(ctx context.Context, leases []protocol.Lease, keysOf func(keyspace.Keys) []string, s *script, fixed func(keyspace.Keys) []any) error {
	shards := make([]keyspace.Shard, len(leases))
	for i, l := range leases {
		shards[i] = l.Shard
	}
	order, groups := group(shards)
	errs := make([]error, len(leases))
	failed := false
	for _, sh := range order {
		idx := groups[sh.Name()]
		k := sh.Keys()
		var args []any
		if fixed != nil {
			args = fixed(k)
		}
		for _, i := range idx {
			args = append(args, leases[i].ID, tokenArg(leases[i].Token))
		}
		res, err := b.run(ctx, s, keysOf(k), args...)
		var oks []int64
		if err == nil {
			oks, err = int64s(res, len(idx))
		}
		for j, i := range idx {
			switch {
			case err != nil:
				errs[i] = queueErr(sh.Queue(), err)
			case oks[j] != 1:
				errs[i] = lostErr(leases[i])
			}
			failed = failed || errs[i] != nil
		}
	}
	if !failed {
		return nil
	}
	return &job.BatchError{Errs: errs}
}

func lostErr(l protocol.Lease) error {
	return fmt.Errorf("%w: job %q in queue %q (token %d)", ErrLeaseLost, l.ID, l.Queue(), l.Token)
}

// leaseResult maps the codes of retry and kill to errors.
func leaseResult(l protocol.Lease, code int64) error {
	switch code {
	case -1:
		return lostErr(l)
	case -2:
		return fmt.Errorf("%w: job %q in queue %q", ErrLeaseLive, l.ID, l.Queue())
	}
	return nil
}

func (w workerSide) Retry(ctx context.Context, l protocol.Lease, delay time.Duration, env *job.Envelope, expired bool) (time.Time, error) {
	body, err := env.MarshalBinary()
	if err != nil {
		return time.Time{}, err
	}
	k := l.Shard.Keys()
	res, err := w.b.run(ctx, retryScript, []string{k.Scheduled, k.Processing, k.Jobs, k.Leases, k.Hist},
		l.ID, tokenArg(l.Token), durMS(max(delay, 0)), body, flag(expired), k.Wake)
	if err != nil {
		return time.Time{}, queueErr(l.Queue(), err)
	}
	ready, _ := res.(int64)
	if err := leaseResult(l, ready); err != nil {
		return time.Time{}, err
	}
	return fromMS(ready), nil
}

func (w workerSide) Kill(ctx context.Context, l protocol.Lease, d protocol.Death, expired bool) (time.Time, error) {
	rec := &DeadRecord{ID: l.ID, Queue: l.Queue(), Type: d.Type, Body: d.Body, Error: d.Error, Attempts: d.Attempts}
	data, err := rec.marshal()
	if err != nil {
		return time.Time{}, err
	}
	q, err := w.b.queue(ctx, l.Queue())
	if err != nil {
		return time.Time{}, err
	}
	k := l.Shard.Keys()
	res, err := w.b.run(ctx, killScript, []string{k.Processing, k.Jobs, k.Attempts, k.Leases, k.Dead, k.DeadIndex, k.Hist},
		l.ID, tokenArg(l.Token), data, flag(expired), w.b.deadCap(q, l.Shard), durMS(w.b.opts.DeadMaxAge))
	if err != nil {
		return time.Time{}, queueErr(l.Queue(), err)
	}
	died, _ := res.(int64)
	if err := leaseResult(l, died); err != nil {
		return time.Time{}, err
	}
	return fromMS(died), nil
}

func (w workerSide) Reap(ctx context.Context, s keyspace.Shard, limit int) (protocol.ReapResult, error) {
	k := s.Keys()
	res, err := w.b.run(ctx, reapScript, []string{k.Processing, k.Jobs, k.Attempts, k.Leases}, limit)
	if err != nil {
		return protocol.ReapResult{}, queueErr(s.Queue(), err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 3 {
		return protocol.ReapResult{}, fmt.Errorf("broker: reap: unexpected reply %v", res)
	}
	now, _ := parts[0].(int64)
	out := protocol.ReapResult{Now: fromMS(now)}
	if out.Jobs, err = decodeClaimed(s, parts[1]); err != nil {
		return protocol.ReapResult{}, err
	}
	out.Orphans, err = strs(parts[2])
	return out, err
}

func (w workerSide) Wakeups(ctx context.Context, queues []string) (<-chan string, func()) {
	return w.b.wakeups(ctx, queues)
}
