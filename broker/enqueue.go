package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// Enqueue validates and stores envelopes: one script call per shard. A batch
// with an invalid envelope is refused whole, with an error wrapping
// job.ErrInvalid that names it, and nothing is written. Nil for a job
// means this call stored it. Ids that are still pending fail with a
// *DuplicateError wrapping ErrDuplicate (in a *job.BatchError for a batch)
// and leave the stored job unchanged, however alike the envelopes and
// whatever the timing: only this call sent again (Resend) is answered as
// the first send was. So do job.Unique ids remembered after their end.
// With job.Replace, a scheduled job with the id is replaced (ErrInProgress
// when a worker holds it). With job.Debounce, a scheduled job with the id
// that is not yet due is replaced and ready the window from now, a due
// one gets the envelope and keeps its ready time (ErrInProgress when a
// worker holds it). A call whose reply was lost fails with a
// *CallError wrapping ErrOutcomeUnknown (ErrNotReplicated when the
// replicas fell short): Resend settles it. On success each envelope gets
// its ID (generated when empty), Queue, CreatedAt and ReadyAt (server
// time). Single-job calls that overlap in time share script calls (see
// combine.go).
func (b *Broker) Enqueue(ctx context.Context, envs ...*job.Envelope) error {
	bodies := make([][]byte, len(envs))
	now := b.createdNow()
	for i, env := range envs {
		body, err := b.prepare(env, now)
		if err != nil {
			if len(envs) > 1 {
				err = fmt.Errorf("job %d of %d: %w", i+1, len(envs), err)
			}
			return err
		}
		bodies[i] = body
	}
	switch len(envs) {
	case 0:
		return nil
	case 1:
		return b.enqueueOne(ctx, envs[0], bodies[0], callID())
	}
	return b.enqueueMany(ctx, envs, bodies, callID())
}

// enqueueOne stores one prepared envelope under call id cid: the first send
// of a single Enqueue, or a resend (its CallError's Resend calls it again
// with the same body and id). It shares script calls with other single
// Enqueues (combine.go); its outcome is recorded under its own call id.
func (b *Broker) enqueueOne(ctx context.Context, env *job.Envelope, body []byte, cid string) error {
	q, err := b.route.Place(ctx, env.Queue)
	if err != nil {
		return queueErr(env.Queue, err)
	}
	err = b.enqueueCombined(ctx, q.Route(env.ID), env, body, cid)
	if err == nil {
		return nil
	}
	return resendable(err, func(ctx context.Context) error { return b.enqueueOne(ctx, env, body, cid) })
}

// enqueueMany stores prepared envelopes, a batch Enqueue with call id cid:
// one script call per shard and chunk, whose outcomes are recorded together
// under cid and the chunk's number. A resend (Resend) calls it
// again with the same bodies and id, so the chunks are the same.
func (b *Broker) enqueueMany(ctx context.Context, envs []*job.Envelope, bodies [][]byte, cid string) error {
	shards := make([]keyspace.Shard, len(envs))
	for i, env := range envs {
		q, err := b.route.Place(ctx, env.Queue)
		if err != nil {
			return queueErr(env.Queue, err)
		}
		shards[i] = q.Route(env.ID)
	}
	errs := make([]error, len(envs))
	order, groups := group(shards)
	for _, s := range order {
		idx := groups[s.Name()]
		if err := b.enqueueShard(ctx, s, envs, bodies, nil, cid, idx, errs); err != nil {
			for _, i := range idx {
				errs[i] = err
			}
		}
	}
	err := batchErr(errs)
	if err == nil {
		return nil
	}
	return resendable(err, func(ctx context.Context) error { return b.enqueueMany(ctx, envs, bodies, cid) })
}

// enqueueChunk bounds the work of one script call so that Redis stays
// responsive to other clients during large batches.
const enqueueChunk = 1000

// enqueueShard stores the envelopes envs[i], i in idx, all of shard s,
// setting errs[i] for those not stored: a duplicate, or a *CallError
// without its resend when the outcome of the script call is open (the
// caller makes it resendable). Each job's outcome is recorded under its
// own call id cids[i], or, when whole is not "", the outcomes of each
// chunk together under whole and the chunk's number. It returns an error
// reply of Redis (nothing was changed).
func (b *Broker) enqueueShard(ctx context.Context, s keyspace.Shard, envs []*job.Envelope, bodies [][]byte, cids []string, whole string, idx []int, errs []error) error {
	k := s.Keys()
	for start := 0; start < len(idx); start += enqueueChunk {
		part := idx[start:min(start+enqueueChunk, len(idx))]
		kk := keyCapKeysOf(k)
		args := frame([]string{k.Scheduled, k.Jobs, k.Unique, k.Calls, k.Parked, k.Held, kk.HeldKeys, kk.ParkedTypes, k.Controls, kk.Turn}, 3+enqueueWidth*len(part))
		chunk := ""
		if whole != "" {
			chunk = whole + "." + strconv.Itoa(start/enqueueChunk)
		}
		args = append(args, k.Wake, b.windowArg(), chunk)
		for _, i := range part {
			var at int64
			if !envs[i].At.IsZero() {
				at = readyMS(envs[i].At)
			}
			cid := ""
			if cids != nil {
				cid = cids[i]
			}
			delay := envs[i].Delay
			if envs[i].Debounce > 0 {
				delay = envs[i].Debounce // ready at the end of the window
			}
			args = append(args, envs[i].ID, bodies[i], at, durUS(delay), enqueueFlags(envs[i]), cid)
		}
		res, err := b.runFrame(ctx, enqueueScript, args)
		if res == nil && !unsure(err) {
			return queueErr(s.Queue(), err)
		}
		var ready []int64
		if err == nil {
			if ready, err = parseEnqueued(res, len(part)); err != nil {
				return err
			}
		}
		for j, i := range part {
			switch {
			case err != nil:
				// The call may have run: each job is stored, or not; or,
				// short of replicas, its outcome stands on the master
				// only. Resend tells.
				cid := chunk
				if cids != nil {
					cid = cids[i]
				}
				errs[i] = unsureErr("enqueue", envs[i].Queue, envs[i].ID, cid, err)
			case ready[j] > 0:
				envs[i].ReadyAt = fromMS(ready[j])
			default:
				o, ok := refusals[ready[j]]
				if !ok {
					return fmt.Errorf("broker: enqueue: unexpected outcome %d for job %q", ready[j], envs[i].ID)
				}
				errs[i] = rules.EnqueueErr(o, envs[i].Queue, envs[i].ID)
			}
		}
	}
	return nil
}

// refusals are enqueue.lua's codes of a job it did not store.
var refusals = map[int64]rules.Outcome{-1: rules.Duplicate, -3: rules.InProgress, -4: rules.DuplicateEnded}

// enqueueWidth is the number of ARGV entries per job of enqueue.lua.
const enqueueWidth = 6

// parseEnqueued decodes enqueue.lua's reply for n jobs: one integer per
// job. A single job comes back as that integer alone, or as {now, ready}.
func parseEnqueued(res any, n int) (ready []int64, err error) {
	if r, ok := res.(int64); ok && n == 1 {
		return []int64{r}, nil
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 2 {
		return nil, fmt.Errorf("broker: enqueue: unexpected reply %v", res)
	}
	if r, ok := parts[1].(int64); ok && n == 1 {
		return []int64{r}, nil
	}
	return int64s(parts[1], n)
}

// enqueueFlags are the flags of env in enqueue.lua: "u" checks the ids
// remembered after their end, "r" replaces a scheduled job, "d" debounces
// (job.Debounce, which Prepare refuses with the other two).
func enqueueFlags(env *job.Envelope) string {
	switch {
	case env.Debounce > 0:
		return "d"
	case env.Unique && env.Replace:
		return "ur"
	case env.Unique:
		return "u"
	case env.Replace:
		return "r"
	}
	return ""
}

// createdNow is the CreatedAt of jobs made now (a test's clock, UseClock):
// a record of when a job was made, never compared with a ready time, which
// comes from the server's clock.
func (b *Broker) createdNow() time.Time {
	if b.clock != nil {
		return b.clock()
	}
	return time.Now()
}

// outcomeUnknown reports whether err leaves it unknown if a script ran: a
// lost connection or a timeout, not an error reply from Redis (a script
// that fails changes nothing, see expect in prelude.lua).
func outcomeUnknown(err error) bool {
	var reply redis.Error
	return err != nil && !errors.As(err, &reply) && !errors.Is(err, ErrNotReplicated)
}

// prepare fills in defaults, validates env (rules.Prepare: the payload cap
// too) and encodes its body.
func (b *Broker) prepare(env *job.Envelope, now time.Time) ([]byte, error) {
	if err := rules.Prepare(env, now, b.opts.MaxPayloadBytes); err != nil {
		return nil, err
	}
	return env.MarshalBinary()
}
