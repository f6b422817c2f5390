package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// The worker's side of the broker (internal/protocol): package worker gets
// it with protocol.For(b), which calls Seams (as protocol.Dead and
// protocol.Admin do). Seams takes a protocol.Key,
// which only delayq's own module can name, so no program can call it: the
// protocol can change with the worker without breaking users.

// Seams hands delayq's own packages the worker's side of the broker, its
// dead-letter store, its operator's side (internal/admin, for the CLI and
// the dashboard) and its test seams: the broker's one hatch. Its argument
// is internal to delayq: code outside delayq's module cannot call it.
func (b *Broker) Seams(protocol.Key) protocol.Seams { return seams{b} }

// seams implements protocol.Seams.
type seams struct{ b *Broker }

// WorkerProtocol returns the broker's side of the worker protocol (wrapped
// while a test of delayq intercepts it).
func (s seams) WorkerProtocol() protocol.Broker {
	if w := s.b.intercepted.Load(); w != nil {
		return *w
	}
	return workerSide{s.b}
}

// InterceptProtocol is delayq's test seam: until undo, WorkerProtocol
// returns wrap of the protocol.
func (s seams) InterceptProtocol(wrap func(protocol.Broker) protocol.Broker) (undo func(), ok bool) {
	w := wrap(workerSide{s.b})
	if !s.b.intercepted.CompareAndSwap(nil, &w) {
		return nil, false
	}
	return func() { s.b.intercepted.Store(nil) }, true
}

// UseClock is delayq's test seam for time: from now on the broker's
// scripts read now (ms) instead of the Redis server's TIME, and the times
// it records (a job's CreatedAt, a queue's last use) come from it too. Call
// it right after New, before the broker is used: tests and the CLI's
// hidden --now flag use it through protocol.UseClock.
func (s seams) UseClock(now func() time.Time) {
	s.b.clock = now
	s.b.route.SetClock(now)
}

// DeadLetters returns the broker's dead-letter store (package deadletter
// reaches it through protocol.Dead).
func (s seams) DeadLetters() protocol.DeadStore { return deadSide{s.b} }

// workerSide implements protocol.Broker.
type workerSide struct{ b *Broker }

var _ protocol.Broker = workerSide{}

func (w workerSide) Shards(ctx context.Context, queue string) ([]keyspace.Shard, error) {
	q, err := w.b.queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	w.b.route.Touch(ctx, queue) // a queue a worker serves is in use: listed
	return q.Shards(), nil
}

func (w workerSide) ForgetIdle(ctx context.Context, idle time.Duration) ([]string, error) {
	return w.b.forgetIdle(ctx, idle)
}

func tokenArg(token int64) string { return strconv.FormatInt(token, 10) }

// refused wraps protocol.ErrRefused around err when Redis answered the call
// with an error of the script itself (see ErrRefused): the expected-type
// check of prelude.lua ("...; nothing was changed"), an error reply of the
// script, or a failure of its run. Errors of the connection, and those
// Redis answers before running a script (LOADING, READONLY, BUSY, OOM...),
// are left as they are: the call may have run, or may run when sent again.
func refused(err error) error {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) {
		return err
	}
	msg := reply.Error()
	if strings.Contains(msg, "nothing was changed") || strings.Contains(msg, "delayq:") ||
		strings.Contains(msg, "user_script") || strings.HasPrefix(msg, "ERR Error running script") {
		return fmt.Errorf("%w: %w", protocol.ErrRefused, err)
	}
	return err
}

func (w workerSide) Claim(ctx context.Context, s keyspace.Shard, c protocol.Caller, id string, n int, lease time.Duration) (protocol.ClaimResult, error) {
	if lease <= 0 {
		return protocol.ClaimResult{}, fmt.Errorf("broker: %w: lease %s must be positive", job.ErrInvalid, lease)
	}
	q, err := w.b.queue(ctx, s.Queue())
	if err != nil {
		return protocol.ClaimResult{}, err
	}
	k := s.Keys()
	kk := keyCapKeysOf(k)
	res, err := w.b.run(ctx, claimScript, []string{k.Scheduled, k.Processing, k.Jobs, k.Attempts, k.Leases, k.Seq, k.Hist, k.Workers + c.ID,
		k.Dead, k.DeadIndex, k.Unique, k.Counts, k.Controls, k.Parked, k.Rate, k.Running, k.Held, k.Batched, k.Window, k.Trimmed,
		kk.Run, kk.Caps, kk.HeldKeys, kk.Paused, kk.ParkedTypes, kk.Rates, kk.Wait, kk.Tat, kk.Turn, kk.Weights},
		n, durMS(lease), id, s.Queue(), w.b.deadCap(q, s), durMS(w.b.opts.DeadMaxAge), max(c.Ahead, 0), recordMS(c), max(c.KeepTrimmed, 0))
	parts, perr := replyParts(s, "claim", res, refused(err), 7)
	if perr != nil {
		return protocol.ClaimResult{}, perr
	}
	now, _ := parts[0].(int64)
	next, _ := parts[1].(int64)
	paused, _ := parts[4].(int64)
	controlled, _ := parts[5].(int64)
	out := protocol.ClaimResult{Now: fromUS(now), Paused: paused == 1, Controlled: controlled == 1}
	if next >= 0 {
		out.Next = fromMS(next)
	}
	jobs, perr := decodeClaimed(s, parts[2])
	if perr != nil {
		return protocol.ClaimResult{}, perr
	}
	unreadable, perr := strs(parts[6])
	if perr != nil {
		return protocol.ClaimResult{}, perr
	}
	for _, id := range unreadable {
		for i := range jobs {
			if jobs[i].ID == id && jobs[i].Err == nil {
				jobs[i].Err = fmt.Errorf("job %q in queue %q: %w: the claim could not read its type: its body has no header "+
					"(it was stored before the header layout) and does not decode in the script (a payload nested too deep or "+
					"with an invalid escape), so the type's pause, concurrency cap and rate limit could not be applied; "+
					"dead-lettered without running", id, s.Queue(), job.ErrCorrupt)
			}
		}
	}
	out.Jobs = jobs
	if out.Orphans, perr = strs(parts[3]); perr != nil {
		return protocol.ClaimResult{}, perr
	}
	if err != nil {
		err = queueErr(s.Queue(), err) // ErrNotReplicated: the jobs are claimed
	}
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
		switch attempt {
		case -1:
			// The script found garbage in the attempts counter and reset it.
			c.Attempt = 1
			c.Err = fmt.Errorf("job %q in queue %q: %w: its attempts counter was not an integer", id, queue, job.ErrCorrupt)
			out = append(out, c)
			continue
		case -2:
			// In processing without a lease (reap): held by nobody.
			c.Attempt = 1
			c.Err = fmt.Errorf("job %q in queue %q: %w: corrupt state: it was processing without a lease", id, queue, job.ErrCorrupt)
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

// uniqueTidyLimit is how many uniqueness entries whose window is over
// (job.Unique) each reaper pass removes at most, per shard: an idle queue's
// set empties at that pace, one ZRANGEBYSCORE and one ZREMRANGEBYRANK per
// pass.
const uniqueTidyLimit = 500

// opWidth is the number of ARGV values of one settle operation.
const opWidth = 9

func (w workerSide) Settle(ctx context.Context, s keyspace.Shard, c protocol.Caller, lane protocol.Lane, id string, ops []protocol.Op) ([]protocol.Settled, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	q, err := w.b.queue(ctx, s.Queue())
	if err != nil {
		return nil, err
	}
	f, err := w.b.settleArgs(q, s, c, lane, id, ops)
	if err != nil {
		return nil, err
	}
	res, err := w.b.runFrame(ctx, settleScript, f)
	parts, perr := replyParts(s, "settle", res, refused(err), 3)
	if perr != nil {
		return nil, perr
	}
	codes, perr := int64s(parts[1], len(ops))
	if perr != nil {
		return nil, perr
	}
	trims, perr := int64s(parts[2], 5)
	if perr != nil {
		return nil, perr
	}
	out := make([]protocol.Settled, len(ops))
	var trimmed *protocol.Trims
	if trims[0] > 0 || trims[1] > 0 {
		trimmed = &protocol.Trims{ByCap: trims[0], ByAge: trims[1], Kept: trims[2], Unarchived: trims[3], Warn: trims[4] == 1,
			Cap: w.b.opts.DeadCap, MaxAge: w.b.opts.DeadMaxAge}
	}
	for i, code := range codes {
		l := ops[i].Lease
		switch {
		case code == -1:
			out[i].Err = lostErr(l)
		case code == -2:
			out[i].Err = fmt.Errorf("%w: job %q in queue %q", protocol.ErrLeaseLive, l.ID, l.Queue())
		case ops[i].Kind == protocol.OpRetry || ops[i].Kind == protocol.OpKill || ops[i].Kind == protocol.OpSnooze:
			out[i].At = fromMS(code)
		}
		if trimmed != nil && ops[i].Kind == protocol.OpKill && out[i].Err == nil {
			out[i].Trims, trimmed = trimmed, nil
		}
	}
	if err != nil {
		err = queueErr(s.Queue(), err) // ErrNotReplicated: recorded on the master
	}
	return out, err
}

// recordMS is how long the broker keeps a worker's last call of each lane
// (ns:{q}:w:<worker>), for a replay: twice its lease. The worker sends a
// call again only within a lease of sending it first, so a resend that
// reaches Redis within another lease finds the record, and an outcome
// recorded once is never reported as a lost lease.
func recordMS(c protocol.Caller) int64 { return 2 * durMS(c.Lease) }

func lostErr(l protocol.Lease) error {
	return fmt.Errorf("%w: job %q in queue %q (token %d)", ErrLeaseLost, l.ID, l.Queue(), l.Token)
}

func (w workerSide) Extend(ctx context.Context, lease time.Duration, leases ...protocol.Lease) error {
	if lease <= 0 {
		return fmt.Errorf("broker: %w: lease %s must be positive", job.ErrInvalid, lease)
	}
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
		args := []any{durMS(lease)}
		for _, i := range idx {
			args = append(args, leases[i].ID, tokenArg(leases[i].Token))
		}
		res, err := w.b.run(ctx, extendScript, []string{k.Processing, k.Leases, k.Cancels}, args...)
		var oks []int64
		if res != nil {
			oks, err = int64s(res, len(idx))
		}
		for j, i := range idx {
			switch {
			case oks == nil:
				errs[i] = queueErr(sh.Queue(), refused(err))
			case oks[j] == 2:
				errs[i] = fmt.Errorf("%w: job %q in queue %q (token %d)", ErrCancelled, leases[i].ID, leases[i].Queue(), leases[i].Token)
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

func (w workerSide) Reap(ctx context.Context, s keyspace.Shard, limit int) (protocol.ReapResult, error) {
	k := s.Keys()
	kk := keyCapKeysOf(k)
	res, err := w.b.run(ctx, reapScript, []string{k.Processing, k.Jobs, k.Attempts, k.Leases, k.Cancels, k.Unique, k.Running, kk.Run, kk.HeldKeys, k.Held, k.Scheduled},
		limit, uniqueTidyLimit)
	parts, perr := replyParts(s, "reap", res, refused(err), 5)
	if perr != nil {
		return protocol.ReapResult{}, perr
	}
	now, _ := parts[0].(int64)
	tidied, _ := parts[4].(int64)
	out := protocol.ReapResult{Now: fromMS(now), UniqueTidied: int(tidied)}
	if out.Jobs, err = decodeClaimed(s, parts[1]); err != nil {
		return protocol.ReapResult{}, err
	}
	out.Orphans, err = strs(parts[2])
	if err != nil {
		return protocol.ReapResult{}, err
	}
	cancelled, err := strs(parts[3])
	for _, id := range cancelled {
		for i := range out.Jobs {
			if out.Jobs[i].ID == id {
				out.Jobs[i].Cancelled = true
			}
		}
	}
	return out, err
}

func (w workerSide) TakeTrimmed(ctx context.Context, s keyspace.Shard, n int) ([]job.TrimmedRecord, error) {
	if n <= 0 {
		return nil, fmt.Errorf("broker: %w: take %d trimmed records: the count must be positive", job.ErrInvalid, n)
	}
	res, err := w.b.run(ctx, takeTrimmedScript, []string{s.Keys().Trimmed}, n)
	if err != nil {
		return nil, queueErr(s.Queue(), refused(err))
	}
	entries, err := strs(res)
	if err != nil {
		return nil, err
	}
	out := make([]job.TrimmedRecord, 0, len(entries))
	for _, e := range entries {
		out = append(out, parseTrimmed(s, e))
	}
	return out, nil
}

// parseTrimmed reads an entry of a shard's trimmed list (trim_dead in
// prelude.lua): "<cap|age>\n<died ms>\n<trimmed ms>\n<record>". A record
// that does not decode comes back as decodeStored gives it (its raw bytes
// as Body, the decode error as Error), so that the hook still sees it.
func parseTrimmed(s keyspace.Shard, e string) job.TrimmedRecord {
	parts := strings.SplitN(e, "\n", 4)
	if len(parts) != 4 {
		return job.TrimmedRecord{DeadRecord: job.DeadRecord{Queue: s.Queue(), Body: []byte(e),
			Error: fmt.Sprintf("%v: trimmed entry without its header", errCorruptRecord)}}
	}
	r := decodeStored(s, "", []byte(parts[3]))
	if died, err := strconv.ParseFloat(parts[1], 64); err == nil {
		r.DiedAt = fromMS(int64(died))
	}
	out := job.TrimmedRecord{DeadRecord: *r, Trim: parts[0]}
	if at, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
		out.TrimmedAt = fromMS(at)
	}
	return out
}

func (w workerSide) Cancels(ctx context.Context, queues []string) (<-chan protocol.CancelNotice, func()) {
	return w.b.cancels(ctx, queues)
}

func (w workerSide) Wakeups(ctx context.Context, queues []string) (<-chan string, func()) {
	return w.b.wakeups(ctx, queues)
}

// replyParts reads the reply of the script name on s: n values, or the
// call's error when it has no reply. (A reply may come with an error, such
// as ErrNotReplicated, that the caller still returns.)
func replyParts(s keyspace.Shard, name string, res any, err error, n int) ([]any, error) {
	if res == nil {
		return nil, queueErr(s.Queue(), err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != n {
		return nil, fmt.Errorf("broker: %s: unexpected reply %v", name, res)
	}
	return parts, nil
}

// settleArgs is the call of settle.lua for ops, all of shard s of queue
// q: its frame (see frame) with the ARGV appended, for runFrame.
func (b *Broker) settleArgs(q keyspace.Queue, s keyspace.Shard, c protocol.Caller, lane protocol.Lane, id string, ops []protocol.Op) ([]any, error) {
	k := s.Keys()
	args := frame(settleKeys(s, c), 8+opWidth*len(ops))
	args = append(args, string(lane), id, recordMS(c), k.Wake, b.deadCap(q, s), durMS(b.opts.DeadMaxAge), max(c.KeepTrimmed, 0), durMS(trimWarnEvery))
	for _, op := range ops {
		if op.Lease.Shard.Name() != s.Name() {
			return nil, fmt.Errorf("broker: settle: job %q is of shard %q, not %q", op.Lease.ID, op.Lease.Shard.Name(), s.Name())
		}
		var a, body, retain, next any = "", "", "", ""
		switch op.Kind {
		case protocol.OpAck:
			if op.Remember > 0 {
				a = durMS(op.Remember)
			}
			if op.Retain > 0 && op.Done != nil {
				data, err := marshalDone(op.Done)
				if err != nil {
					return nil, err
				}
				body, retain = data, max(durMS(op.Retain), 1)
			}
			if len(op.Next) > 0 {
				data, err := chainArg(op.Next)
				if err != nil {
					return nil, err
				}
				next = data
			}
		case protocol.OpRetry, protocol.OpSnooze:
			data, err := op.Env.MarshalBinary()
			if err != nil {
				return nil, err
			}
			a, body = durUS(op.Delay), data
		case protocol.OpKill:
			rec := &job.DeadRecord{ID: op.Lease.ID, Queue: s.Queue(), Type: op.Death.Type, Body: op.Death.Body, Error: op.Death.Error, Attempts: op.Death.Attempts, Reason: op.Death.Reason}
			data, err := marshalDead(rec)
			if err != nil {
				return nil, err
			}
			body = data
			if op.Remember > 0 {
				a = durMS(op.Remember)
			}
		}
		batch := ""
		if op.Kind == protocol.OpAck || op.Kind == protocol.OpKill {
			batch = op.Batch
		}
		args = append(args, kindArg(op.Kind), op.Lease.ID, op.Lease.Token, a, body, flagArg(op.Expired), batch, retain, next)
	}
	return args, nil
}

// The settle arguments that repeat, boxed once: a string or an int64 put
// in an interface costs an allocation each time (go-redis writes an int64
// argument as its decimal digits, as tokenArg does).
var (
	argOne, argZero any = "1", "0"
	kindArgs            = func() (m [256]any) {
		for _, k := range []protocol.OpKind{protocol.OpAck, protocol.OpRetry, protocol.OpKill, protocol.OpRelease, protocol.OpSnooze} {
			m[k] = string(rune(k))
		}
		return m
	}()
)

func kindArg(k protocol.OpKind) any {
	if a := kindArgs[k]; a != nil {
		return a
	}
	return string(rune(k))
}

func flagArg(v bool) any {
	if v {
		return argOne
	}
	return argZero
}

// settleKeys are the keys of settle.lua for worker c on shard s.
func settleKeys(s keyspace.Shard, c protocol.Caller) []string {
	k := s.Keys()
	kk := keyCapKeysOf(k)
	return []string{k.Scheduled, k.Processing, k.Jobs, k.Attempts, k.Leases, k.Dead, k.DeadIndex, k.Hist, k.Workers + c.ID, k.Unique, k.Cancels, k.Running, k.Batched, k.Progress, k.Done,
		k.Counts, k.Trimmed, kk.Run, kk.HeldKeys, k.Held}
}
