package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/rawjson"
	"github.com/delayq/delayq/job"
)

// DeadRecord is a job that used up its retries or failed permanently.
type DeadRecord struct {
	ID       string
	Queue    string
	Type     string        // job type, "" when the envelope was corrupt
	Body     []byte        // the envelope as it was stored
	Envelope *job.Envelope // Body decoded; nil when it does not decode
	Error    string        // the final error (with a stack trace for panics)
	Attempts int           // attempts spent
	DiedAt   time.Time     // server time; from the dead index
}

type deadWire struct {
	ID       string          `json:"id"`
	Queue    string          `json:"q"`
	Type     string          `json:"t,omitempty"`
	Env      json.RawMessage `json:"env,omitempty"`
	EnvB     []byte          `json:"envb,omitempty"` // a body that is not JSON, base64
	Error    string          `json:"err"`
	Attempts int             `json:"att"`
}

// MaxDeadErrorLen caps the error kept in a dead record, in bytes.
const MaxDeadErrorLen = 64 << 10

func (r *DeadRecord) marshal() ([]byte, error) {
	w := deadWire{ID: r.ID, Queue: r.Queue, Type: r.Type, Error: r.Error, Attempts: r.Attempts}
	if len(w.Error) > MaxDeadErrorLen {
		cut := MaxDeadErrorLen
		for cut > 0 && !utf8.RuneStart(w.Error[cut]) {
			cut--
		}
		w.Error = w.Error[:cut] + "… (truncated)"
	}
	// The body is kept byte for byte: corrupt bodies too, so that what
	// another program wrote can be inspected as it was.
	if rawjson.IsCompact(r.Body) {
		w.Env = r.Body
	} else {
		w.EnvB = r.Body
	}
	return rawjson.Marshal(&w)
}

// ErrCorruptRecord is wrapped by DecodeDeadRecord errors.
var ErrCorruptRecord = errors.New("broker: corrupt dead record")

// DecodeDeadRecord parses a stored dead record. It never panics; bad input
// gives an error wrapping ErrCorruptRecord. DiedAt is left zero (it lives in
// the index).
func DecodeDeadRecord(data []byte) (*DeadRecord, error) {
	var w deadWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptRecord, err)
	}
	if w.ID == "" || w.Queue == "" {
		return nil, fmt.Errorf("%w: missing id or queue", ErrCorruptRecord)
	}
	r := &DeadRecord{ID: w.ID, Queue: w.Queue, Type: w.Type, Error: w.Error, Attempts: w.Attempts}
	if len(w.Env) > 0 {
		r.Body = []byte(w.Env)
	} else {
		r.Body = w.EnvB
	}
	if env, err := job.Decode(r.Body); err == nil {
		env.ID, env.Queue = r.ID, r.Queue
		r.Envelope = env
	}
	return r, nil
}

// DeadCursor marks a position in a queue's dead list, newest first. The zero
// value starts at the newest record.
type DeadCursor struct {
	DiedAt time.Time
	ID     string
}

// IsZero reports whether c is the start of the list.
func (c DeadCursor) IsZero() bool { return c.ID == "" }

// DeadPage returns up to limit dead records of queue older than the cursor,
// newest first, and the cursor of the next page (zero when there is none).
// Records inserted or removed meanwhile do not cause gaps or repeats among
// the others. The pages of a sharded queue's shards are merged.
func (b *Broker) DeadPage(ctx context.Context, queue string, after DeadCursor, limit int) ([]*DeadRecord, DeadCursor, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return nil, DeadCursor{}, err
	}
	if limit <= 0 {
		return nil, DeadCursor{}, fmt.Errorf("broker: %w: page limit %d must be positive", job.ErrInvalid, limit)
	}
	return b.deadPageShards(ctx, queue, after, limit)
}

// deadPage is DeadPage of one physical queue.
func (b *Broker) deadPage(ctx context.Context, queue string, after DeadCursor, limit int) ([]*DeadRecord, DeadCursor, error) {
	k := b.keys(queue)
	maxScore, skipped := "+inf", 0
	if !after.IsZero() {
		maxScore = strconv.FormatInt(ms(after.DiedAt), 10)
	}
	var entries []redis.Z
	for {
		zs, err := b.rdb.ZRevRangeByScoreWithScores(ctx, k.deadIndex, &redis.ZRangeBy{
			Max: maxScore, Min: "-inf", Offset: int64(skipped), Count: int64(limit + 1),
		}).Result()
		if err != nil {
			return nil, DeadCursor{}, queueErr(queue, err)
		}
		// Records that share the cursor's millisecond come in descending id
		// order; those at or above the cursor's id were listed already. Skip
		// them and read again, so that the page is full.
		cut := 0
		for !after.IsZero() && cut < len(zs) && int64(zs[cut].Score) == ms(after.DiedAt) && zs[cut].Member.(string) >= after.ID {
			cut++
		}
		if cut == 0 {
			entries = zs
			break
		}
		skipped += cut
	}
	more := len(entries) > limit
	if more {
		entries = entries[:limit]
	}
	ids := make([]string, len(entries))
	for i, z := range entries {
		ids[i] = z.Member.(string)
	}
	recs, err := b.deadRecords(ctx, queue, ids)
	if err != nil {
		return nil, DeadCursor{}, err
	}
	out := make([]*DeadRecord, 0, len(recs))
	for i, r := range recs {
		if r == nil {
			continue // deleted between the two reads
		}
		r.DiedAt = fromMS(int64(entries[i].Score))
		out = append(out, r)
	}
	var next DeadCursor
	if more && len(entries) > 0 {
		last := entries[len(entries)-1]
		next = DeadCursor{DiedAt: fromMS(int64(last.Score)), ID: last.Member.(string)}
	}
	return out, next, nil
}

// deadRecords reads records by id; missing ones are nil. Records that do not
// decode come back with their raw bytes as Body and the decode error as
// Error, so that they can still be listed and deleted.
func (b *Broker) deadRecords(ctx context.Context, queue string, ids []string) ([]*DeadRecord, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := b.rdb.HMGet(ctx, b.keys(queue).dead, ids...).Result()
	if err != nil {
		return nil, queueErr(queue, err)
	}
	out := make([]*DeadRecord, len(ids))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		r, err := DecodeDeadRecord([]byte(s))
		if err != nil {
			r = &DeadRecord{ID: ids[i], Queue: queue, Body: []byte(s), Error: err.Error()}
		}
		out[i] = r
	}
	return out, nil
}

// DeadGet returns one dead record, or an error wrapping ErrNotFound.
func (b *Broker) DeadGet(ctx context.Context, queue, id string) (*DeadRecord, error) {
	if err := validQueueID(queue, id); err != nil {
		return nil, err
	}
	q, err := b.locate(ctx, queue, id)
	if err != nil {
		return nil, queueErr(queue, err)
	}
	k := b.keys(q)
	pipe := b.rdb.Pipeline()
	get := pipe.HGet(ctx, k.dead, id)
	score := pipe.ZScore(ctx, k.deadIndex, id)
	_, _ = pipe.Exec(ctx)
	data, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: no dead job %q in queue %q", ErrNotFound, id, queue)
	}
	if err != nil {
		return nil, queueErr(queue, err)
	}
	r, err := DecodeDeadRecord(data)
	if err != nil {
		r = &DeadRecord{ID: id, Queue: queue, Body: data, Error: err.Error()}
	}
	if s, err := score.Result(); err == nil {
		r.DiedAt = fromMS(int64(s))
	}
	return r, nil
}

// Redrive moves dead jobs of queue back to the schedule, ready after delay,
// with their attempts reset: one read and one script call. It returns nil or
// a *job.BatchError aligned with ids whose entries wrap ErrNotFound (no such
// dead job, or it changed meanwhile) or ErrDuplicate (a job with that id is
// pending again; its dead record is kept). Nothing is lost either way.
func (b *Broker) Redrive(ctx context.Context, queue string, delay time.Duration, ids ...string) error {
	if err := job.ValidateQueue(queue); err != nil {
		return err
	}
	if err := job.ValidateDelay(delay); err != nil {
		return err
	}
	return b.perShard(ctx, queue, ids, func(q string, ids []string) error { return b.redrive(ctx, q, delay, ids) })
}

// redrive is Redrive on one physical queue.
func (b *Broker) redrive(ctx context.Context, queue string, delay time.Duration, ids []string) error {
	errs := make([]error, len(ids))
	failed := false
	fail := func(i int, err error) { errs[i], failed = err, true }
	k := b.keys(queue)
	raw, err := b.rdb.HMGet(ctx, k.dead, ids...).Result()
	if err != nil {
		return queueErr(queue, err)
	}
	args := []any{k.wake, durMS(delay)}
	var sent []int
	for i, v := range raw {
		s, ok := v.(string)
		if !ok {
			fail(i, fmt.Errorf("%w: no dead job %q in queue %q", ErrNotFound, ids[i], queue))
			continue
		}
		body := []byte(s)
		if r, err := DecodeDeadRecord(body); err == nil {
			body = r.Body
		}
		args = append(args, ids[i], s, body)
		sent = append(sent, i)
	}
	if len(sent) > 0 {
		res, err := b.run(ctx, redriveScript, []string{k.scheduled, k.jobs, k.attempts, k.dead, k.deadIndex}, args...)
		if err != nil {
			return queueErr(queue, err)
		}
		codes, err := int64s(res, len(sent))
		if err != nil {
			return err
		}
		for j, i := range sent {
			switch {
			case codes[j] == 0:
				fail(i, fmt.Errorf("%w: dead job %q in queue %q changed or is gone", ErrNotFound, ids[i], queue))
			case codes[j] < 0:
				fail(i, fmt.Errorf("%w: id %q in queue %q", ErrDuplicate, ids[i], queue))
			}
		}
	}
	if !failed {
		return nil
	}
	if len(ids) == 1 {
		return errs[0]
	}
	return &job.BatchError{Errs: errs}
}

// DeadDelete removes dead records. It returns nil or a *job.BatchError whose
// entries wrap ErrNotFound.
func (b *Broker) DeadDelete(ctx context.Context, queue string, ids ...string) error {
	if err := job.ValidateQueue(queue); err != nil {
		return err
	}
	return b.perShard(ctx, queue, ids, func(q string, ids []string) error { return b.deadDelete(ctx, q, ids) })
}

// deadDelete is DeadDelete on one physical queue.
func (b *Broker) deadDelete(ctx context.Context, queue string, ids []string) error {
	k := b.keys(queue)
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	res, err := b.run(ctx, deadDeleteScript, []string{k.dead, k.deadIndex}, args...)
	if err != nil {
		return queueErr(queue, err)
	}
	codes, err := int64s(res, len(ids))
	if err != nil {
		return err
	}
	errs := make([]error, len(ids))
	failed := false
	for i, c := range codes {
		if c != 1 {
			errs[i], failed = fmt.Errorf("%w: no dead job %q in queue %q", ErrNotFound, ids[i], queue), true
		}
	}
	switch {
	case !failed:
		return nil
	case len(ids) == 1:
		return errs[0]
	default:
		return &job.BatchError{Errs: errs}
	}
}

// DeadPurge removes every dead record of queue and returns how many there
// were.
func (b *Broker) DeadPurge(ctx context.Context, queue string) (int64, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return 0, err
	}
	return b.sumShards(ctx, queue, func(q string) (int64, error) { return b.deadPurge(ctx, q) })
}

// deadPurge is DeadPurge of one physical queue.
func (b *Broker) deadPurge(ctx context.Context, queue string) (int64, error) {
	k := b.keys(queue)
	var n *redis.IntCmd
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		n = p.HLen(ctx, k.dead)
		p.Unlink(ctx, k.dead, k.deadIndex)
		return nil
	})
	if err != nil {
		return 0, queueErr(queue, err)
	}
	return n.Val(), nil
}

// DeadTrim applies the retention rules (cap and max age) now and returns
// how many records were dropped.
func (b *Broker) DeadTrim(ctx context.Context, queue string) (int64, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return 0, err
	}
	return b.sumShards(ctx, queue, func(q string) (int64, error) { return b.deadTrim(ctx, q) })
}

// deadTrim is DeadTrim of one physical queue.
func (b *Broker) deadTrim(ctx context.Context, queue string) (int64, error) {
	k := b.keys(queue)
	res, err := b.run(ctx, trimScript, []string{k.dead, k.deadIndex}, b.opts.DeadCap, durMS(b.opts.DeadMaxAge))
	if err != nil {
		return 0, queueErr(queue, err)
	}
	n, _ := res.(int64)
	return n, nil
}
