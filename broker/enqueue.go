package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// Enqueue validates and stores envelopes: one script call per shard. A batch
// with an invalid envelope is refused whole, with an error wrapping
// job.ErrInvalid that names it, and nothing is written. Ids that are still
// pending fail with a *DuplicateError wrapping ErrDuplicate (in a
// *job.BatchError for a batch) and leave the stored job unchanged; so do
// job.Unique ids remembered after their end. With job.Replace, a scheduled
// job with the id is replaced (ErrInProgress when a worker holds it). On
// success each envelope gets its ID (generated when empty), Queue,
// CreatedAt and ReadyAt (server time). Single-job calls that overlap in
// time share script calls (see combine.go).
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
	shards := make([]keyspace.Shard, len(envs))
	for i, env := range envs {
		q, err := b.route.Place(ctx, env.Queue)
		if err != nil {
			return queueErr(env.Queue, err)
		}
		shards[i] = q.Route(env.ID)
	}
	if len(envs) == 1 {
		return b.enqueueCombined(ctx, shards[0], envs[0], bodies[0])
	}
	errs := make([]error, len(envs))
	order, groups := group(shards)
	for _, s := range order {
		idx := groups[s.Name()]
		if err := b.enqueueShard(ctx, s, envs, bodies, idx, errs); err != nil {
			for _, i := range idx {
				errs[i] = err
			}
		}
	}
	return batchErr(errs)
}

// enqueueChunk bounds the work of one script call so that Redis stays
// responsive to other clients during large batches.
const enqueueChunk = 1000

// enqueueShard stores the envelopes envs[i], i in idx, all of shard s,
// setting errs[i] for duplicates. It returns a Redis error, which leaves
// the outcome of its chunk unknown.
func (b *Broker) enqueueShard(ctx context.Context, s keyspace.Shard, envs []*job.Envelope, bodies [][]byte, idx []int, errs []error) error {
	k := s.Keys()
	for start := 0; start < len(idx); start += enqueueChunk {
		part := idx[start:min(start+enqueueChunk, len(idx))]
		args := make([]any, 0, 1+5*len(part))
		args = append(args, k.Wake)
		for _, i := range part {
			var at int64
			if !envs[i].At.IsZero() {
				at = readyMS(envs[i].At)
			}
			args = append(args, envs[i].ID, bodies[i], at, durUS(envs[i].Delay), enqueueFlags(envs[i]))
		}
		res, err := b.run(ctx, enqueueScript, []string{k.Scheduled, k.Jobs, k.Unique}, args...)
		if res == nil {
			if outcomeUnknown(err) {
				// The call may have run: each job is stored, or not.
				for _, i := range part {
					errs[i] = fmt.Errorf("%w: job %q in queue %q: %w", ErrOutcomeUnknown, envs[i].ID, envs[i].Queue, err)
				}
				continue
			}
			return queueErr(s.Queue(), err)
		}
		now, ready, perr := parseEnqueued(res, len(part))
		if perr != nil {
			return perr
		}
		for j, i := range part {
			switch {
			case err != nil:
				// Short of replicas: stored on the master, or a duplicate
				// of a job that may not be on the replicas either.
				errs[i] = queueErr(s.Queue(), err)
			case ready[j] == -1 || ready[j] == -4:
				errs[i] = &DuplicateError{Queue: envs[i].Queue, ID: envs[i].ID, Ended: ready[j] == -4}
			case ready[j] == -3:
				errs[i] = fmt.Errorf("%w: job %q in queue %q is held by a worker and cannot be replaced", ErrInProgress, envs[i].ID, envs[i].Queue)
			case ready[j] == -2:
				// This very envelope was stored by an earlier run of the
				// call, and a worker has it already.
				envs[i].ReadyAt = fromUS(now).Truncate(time.Millisecond)
			default:
				envs[i].ReadyAt = fromMS(ready[j])
			}
		}
	}
	return nil
}

// parseEnqueued decodes enqueue.lua's reply for n jobs: the server's time
// (µs, 0 when the script did not read it) and one integer per job. A single
// job that was stored comes back as {now, ready} or as its ready time alone.
func parseEnqueued(res any, n int) (now int64, ready []int64, err error) {
	if r, ok := res.(int64); ok && n == 1 {
		return 0, []int64{r}, nil
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 2 {
		return 0, nil, fmt.Errorf("broker: enqueue: unexpected reply %v", res)
	}
	now, _ = parts[0].(int64)
	if r, ok := parts[1].(int64); ok && n == 1 {
		return now, []int64{r}, nil
	}
	ready, err = int64s(parts[1], n)
	return now, ready, err
}

// enqueueFlags are the flags of env in enqueue.lua: "u" checks the ids
// remembered after their end, "r" replaces a scheduled job.
func enqueueFlags(env *job.Envelope) string {
	switch {
	case env.Unique && env.Replace:
		return "ur"
	case env.Unique:
		return "u"
	case env.Replace:
		return "r"
	}
	return ""
}

// createdNow is the CreatedAt of jobs made now (the options' Clock in
// tests): a record of when a job was made, never compared with a ready
// time, which comes from the server's clock.
func (b *Broker) createdNow() time.Time {
	if b.opts.Clock != nil {
		return b.opts.Clock()
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

// prepare fills in defaults, validates env and encodes its body.
func (b *Broker) prepare(env *job.Envelope, now time.Time) ([]byte, error) {
	if env == nil {
		return nil, fmt.Errorf("broker: %w: nil envelope", job.ErrInvalid)
	}
	if err := job.Prepare(env, now); err != nil {
		return nil, err
	}
	if c := b.opts.MaxPayloadBytes; c > 0 {
		size := len(env.Payload)
		for k, v := range env.Headers {
			size += len(k) + len(v)
		}
		if size > c {
			return nil, fmt.Errorf("broker: %w: %w: payload and headers of job %q are %d bytes, the cap is %d", job.ErrInvalid, ErrPayloadTooLarge, env.ID, size, c)
		}
	}
	return env.MarshalBinary()
}
