package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/rawjson"
	"github.com/delayq/delayq/job"
)

type deadWire struct {
	ID       string          `json:"id"`
	Queue    string          `json:"q"`
	Type     string          `json:"t,omitempty"`
	Env      json.RawMessage `json:"env,omitempty"`
	EnvB     []byte          `json:"envb,omitempty"` // a body that is not JSON, base64
	Error    string          `json:"err"`
	Attempts int             `json:"att"`
	Reason   string          `json:"why,omitempty"`
}

// ReasonExpired is the job.DeadRecord.Reason of a job that had not started by
// its expiry (job.ExpireAt). Redrive runs such a job without its expiry.
const ReasonExpired = "expired"

// ReasonCancelled is the job.DeadRecord.Reason of a job cancelled while it ran
// (Cancel).
const ReasonCancelled = "cancelled"

// ReasonCallbackRefused is the job.DeadRecord.Reason of a batch callback that
// the broker refused when it was due (its stored body no longer decodes, or
// is over today's MaxPayloadBytes): its batch counts it as fired, and ends.
const ReasonCallbackRefused = "callback refused"

// expiryTail is the end of a body with an expiry (job.Envelope.ExpireAt,
// its last field).
var expiryTail = regexp.MustCompile(`,"x":"[0-9]+d?"}$`)

// withoutExpiry returns body without its expiry field.
func withoutExpiry(body []byte) []byte {
	return expiryTail.ReplaceAll(body, []byte("}"))
}

// MaxDeadErrorLen caps the error kept in a dead record, in bytes.
const MaxDeadErrorLen = 64 << 10

func marshalDead(r *job.DeadRecord) ([]byte, error) {
	w := deadWire{ID: r.ID, Queue: r.Queue, Type: r.Type, Error: r.Error, Attempts: r.Attempts, Reason: r.Reason}
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
func DecodeDeadRecord(data []byte) (*job.DeadRecord, error) {
	var w deadWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptRecord, err)
	}
	if w.ID == "" || w.Queue == "" {
		return nil, fmt.Errorf("%w: missing id or queue", ErrCorruptRecord)
	}
	r := &job.DeadRecord{ID: w.ID, Queue: w.Queue, Type: w.Type, Error: w.Error, Attempts: w.Attempts, Reason: w.Reason}
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

// DeadLetters returns the broker's dead-letter store, behind package
// deadletter (deadletter.New), the API of dead letters. Its argument is
// internal to delayq: code outside delayq's module cannot call it.
func (b *Broker) DeadLetters(protocol.Key) protocol.DeadStore { return deadSide{b} }

// deadSide implements protocol.DeadStore.
type deadSide struct{ b *Broker }

func (d deadSide) Page(ctx context.Context, queue string, after protocol.DeadCursor, limit int) ([]*job.DeadRecord, protocol.DeadCursor, error) {
	return d.b.pageDead(ctx, queue, after, limit)
}

func (d deadSide) Get(ctx context.Context, queue, id string) (*job.DeadRecord, error) {
	return d.b.getDead(ctx, queue, id)
}

func (d deadSide) Redrive(ctx context.Context, queue string, delay time.Duration, ids ...string) error {
	return d.b.redriveDead(ctx, queue, delay, ids...)
}

func (d deadSide) Delete(ctx context.Context, queue string, ids ...string) error {
	return d.b.deleteDead(ctx, queue, ids...)
}

func (d deadSide) Purge(ctx context.Context, queue string) (int64, error) {
	return d.b.purgeDead(ctx, queue)
}

func (d deadSide) Trim(ctx context.Context, queue string) (int64, error) {
	return d.b.trimDead(ctx, queue)
}

// pageDead returns up to limit dead records of queue older than the cursor,
// newest first, and the cursor of the next page (zero when there is none).
// Records inserted or removed meanwhile do not cause gaps or repeats among
// the others. The pages of a sharded queue's shards are merged.
func (b *Broker) pageDead(ctx context.Context, queue string, after protocol.DeadCursor, limit int) ([]*job.DeadRecord, protocol.DeadCursor, error) {
	q, err := b.queue(ctx, queue)
	if err != nil {
		return nil, protocol.DeadCursor{}, err
	}
	if limit <= 0 {
		return nil, protocol.DeadCursor{}, fmt.Errorf("broker: %w: page limit %d must be positive", job.ErrInvalid, limit)
	}
	if !q.Sharded() {
		return b.deadPage(ctx, q.Shards()[0], after, limit)
	}
	// Each shard's next limit records after the cursor hold the merged
	// next limit, newest first (by died-at, then id descending, as within
	// one shard). An empty page is an empty list, as for one shard.
	all := []*job.DeadRecord{}
	more := false
	for _, s := range q.Shards() {
		recs, next, err := b.deadPage(ctx, s, after, limit)
		if err != nil {
			return nil, protocol.DeadCursor{}, err
		}
		all = append(all, recs...)
		more = more || !next.IsZero()
	}
	slices.SortFunc(all, func(x, y *job.DeadRecord) int {
		if c := y.DiedAt.Compare(x.DiedAt); c != 0 {
			return c
		}
		return strings.Compare(y.ID, x.ID)
	})
	if len(all) > limit {
		all, more = all[:limit], true
	}
	var next protocol.DeadCursor
	if more && len(all) > 0 {
		last := all[len(all)-1]
		next = protocol.DeadCursor{DiedAt: last.DiedAt, ID: last.ID}
	}
	return all, next, nil
}

// deadPage is pageDead of one shard.
func (b *Broker) deadPage(ctx context.Context, s keyspace.Shard, after protocol.DeadCursor, limit int) ([]*job.DeadRecord, protocol.DeadCursor, error) {
	k := s.Keys()
	maxScore, skipped := "+inf", 0
	if !after.IsZero() {
		maxScore = strconv.FormatInt(ms(after.DiedAt), 10)
	}
	var entries []redis.Z
	for {
		zs, err := b.rdb.ZRevRangeByScoreWithScores(ctx, k.DeadIndex, &redis.ZRangeBy{
			Max: maxScore, Min: "-inf", Offset: int64(skipped), Count: int64(limit + 1),
		}).Result()
		if err != nil {
			return nil, protocol.DeadCursor{}, queueErr(s.Queue(), b.wrongType(ctx, k.DeadIndex, "zset", err))
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
	recs, err := b.deadRecords(ctx, s, ids)
	if err != nil {
		return nil, protocol.DeadCursor{}, err
	}
	out := make([]*job.DeadRecord, 0, len(recs))
	for i, r := range recs {
		if r == nil {
			continue // deleted between the two reads
		}
		r.DiedAt = fromMS(int64(entries[i].Score))
		out = append(out, r)
	}
	var next protocol.DeadCursor
	if more && len(entries) > 0 {
		last := entries[len(entries)-1]
		next = protocol.DeadCursor{DiedAt: fromMS(int64(last.Score)), ID: last.Member.(string)}
	}
	return out, next, nil
}

// decodeStored decodes a stored dead record; one that does not decode comes
// back with its raw bytes as Body and the decode error as Error, so that it
// can still be listed and deleted.
func decodeStored(s keyspace.Shard, id string, data []byte) *job.DeadRecord {
	r, err := DecodeDeadRecord(data)
	if err != nil {
		r = &job.DeadRecord{ID: id, Queue: s.Queue(), Body: data, Error: err.Error()}
	}
	return r
}

// deadRecords reads records by id; missing ones are nil.
func (b *Broker) deadRecords(ctx context.Context, s keyspace.Shard, ids []string) ([]*job.DeadRecord, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := b.rdb.HMGet(ctx, s.Keys().Dead, ids...).Result()
	if err != nil {
		return nil, queueErr(s.Queue(), err)
	}
	out := make([]*job.DeadRecord, len(ids))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[i] = decodeStored(s, ids[i], []byte(str))
		}
	}
	return out, nil
}

// getDead returns one dead record, or an error wrapping ErrNotFound.
func (b *Broker) getDead(ctx context.Context, queue, id string) (*job.DeadRecord, error) {
	s, err := b.shardOf(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	k := s.Keys()
	pipe := b.rdb.Pipeline()
	get := pipe.HGet(ctx, k.Dead, id)
	score := pipe.ZScore(ctx, k.DeadIndex, id)
	_, _ = pipe.Exec(ctx)
	data, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: no dead job %q in queue %q", ErrNotFound, id, queue)
	}
	if err != nil {
		return nil, queueErr(queue, err)
	}
	r := decodeStored(s, id, data)
	if sc, err := score.Result(); err == nil {
		r.DiedAt = fromMS(int64(sc))
	}
	return r, nil
}

// redriveDead moves dead jobs of queue back to the schedule, ready after delay,
// with their attempts reset: one read and one script call per shard. It
// returns nil or a *job.BatchError aligned with ids whose entries wrap
// ErrNotFound (no such dead job, or it changed meanwhile) or ErrDuplicate (a
// job with that id is pending again; its dead record is kept). Nothing is
// lost either way. A shard's call whose reply was lost fails its ids with a
// *CallError (ErrOutcomeUnknown): Resend answers the whole call as its
// first send was (nil for a job it redrove, even after the job ran again
// and ended, not ErrNotFound), and redrives nothing twice.
func (b *Broker) redriveDead(ctx context.Context, queue string, delay time.Duration, ids ...string) error {
	if err := naming.Queue(queue); err != nil {
		return err
	}
	if err := naming.Delay(delay); err != nil {
		return err
	}
	return b.redriveCall(ctx, queue, delay, ids, callID())
}

// redriveCall is one send of a redrive call with id cid (each shard's
// script call keeps its answer under it, in its own slot).
func (b *Broker) redriveCall(ctx context.Context, queue string, delay time.Duration, ids []string, cid string) error {
	err := b.perShard(ctx, queue, ids, func(s keyspace.Shard, ids []string) []error { return b.redrive(ctx, s, delay, ids, cid) })
	return resendable(err, func(ctx context.Context) error { return b.redriveCall(ctx, queue, delay, ids, cid) })
}

// redrive is redriveDead on one shard.
func (b *Broker) redrive(ctx context.Context, s keyspace.Shard, delay time.Duration, ids []string, cid string) []error {
	errs := make([]error, len(ids))
	all := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	k := s.Keys()
	raw, err := b.rdb.HMGet(ctx, k.Dead, ids...).Result()
	if err != nil {
		return all(queueErr(s.Queue(), fmt.Errorf("read %s: %w; nothing was changed", k.Dead, err)))
	}
	// Every id goes to the script, those without a dead record too: a
	// resent call finds its first answer there, whatever was read.
	args := []any{k.Wake, durUS(delay), cid, b.windowArg()}
	missing := make([]bool, len(ids))
	for i, v := range raw {
		str, ok := v.(string)
		if !ok {
			missing[i] = true
			args = append(args, ids[i], "", "")
			continue
		}
		body := []byte(str)
		if r, err := DecodeDeadRecord(body); err == nil {
			body = r.Body
			if r.Reason == ReasonExpired {
				// Redriven by an operator: it runs, its expiry dropped.
				body = withoutExpiry(body)
			}
		}
		args = append(args, ids[i], str, body)
	}
	res, err := b.run(ctx, redriveScript, []string{k.Scheduled, k.Jobs, k.Attempts, k.Dead, k.DeadIndex, k.Calls}, args...)
	if unsure(err) {
		for i, id := range ids {
			errs[i] = unsureErr("redrive", s.Queue(), id, cid, err)
		}
		return errs
	}
	if err != nil {
		return all(queueErr(s.Queue(), err))
	}
	codes, err := int64s(res, len(ids))
	if err != nil {
		return all(err)
	}
	for i, code := range codes {
		switch {
		case code == 0 && missing[i]:
			errs[i] = fmt.Errorf("%w: no dead job %q in queue %q", ErrNotFound, ids[i], s.Queue())
		case code == 0:
			errs[i] = fmt.Errorf("%w: dead job %q in queue %q changed or is gone", ErrNotFound, ids[i], s.Queue())
		case code < 0:
			errs[i] = &DuplicateError{Queue: s.Queue(), ID: ids[i]}
		}
	}
	return errs
}

// deleteDead removes dead records. It returns nil or a *job.BatchError whose
// entries wrap ErrNotFound. A shard's call whose reply was lost fails its
// ids with a *CallError (ErrOutcomeUnknown): Resend answers the whole call
// as its first send was (nil for a record it deleted, not ErrNotFound).
func (b *Broker) deleteDead(ctx context.Context, queue string, ids ...string) error {
	return b.deadDeleteCall(ctx, queue, ids, callID())
}

// deadDeleteCall is one send of a delete call with id cid.
func (b *Broker) deadDeleteCall(ctx context.Context, queue string, ids []string, cid string) error {
	err := b.perShard(ctx, queue, ids, func(s keyspace.Shard, ids []string) []error { return b.deadDelete(ctx, s, ids, cid) })
	return resendable(err, func(ctx context.Context) error { return b.deadDeleteCall(ctx, queue, ids, cid) })
}

// deadDelete is deleteDead on one shard.
func (b *Broker) deadDelete(ctx context.Context, s keyspace.Shard, ids []string, cid string) []error {
	errs := make([]error, len(ids))
	k := s.Keys()
	args := make([]any, 0, 2+len(ids))
	args = append(args, cid, b.windowArg())
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := b.run(ctx, deadDeleteScript, []string{k.Dead, k.DeadIndex, k.Calls}, args...)
	var codes []int64
	if err == nil {
		codes, err = int64s(res, len(ids))
	}
	for i, id := range ids {
		switch {
		case unsure(err):
			errs[i] = unsureErr("dead delete", s.Queue(), id, cid, err)
		case err != nil:
			errs[i] = queueErr(s.Queue(), err)
		case codes[i] != 1:
			errs[i] = fmt.Errorf("%w: no dead job %q in queue %q", ErrNotFound, id, s.Queue())
		}
	}
	return errs
}

// purgeDead removes every dead record of queue and returns how many there
// were.
func (b *Broker) purgeDead(ctx context.Context, queue string) (int64, error) {
	return b.sumShards(ctx, queue, func(_ keyspace.Queue, s keyspace.Shard) (int64, error) {
		k := s.Keys()
		var n *redis.IntCmd
		_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			n = p.HLen(ctx, k.Dead)
			p.Unlink(ctx, k.Dead, k.DeadIndex)
			return nil
		})
		return n.Val(), err
	})
}

// trimDead applies the retention rules (cap and max age) now and returns
// how many records were dropped.
func (b *Broker) trimDead(ctx context.Context, queue string) (int64, error) {
	return b.sumShards(ctx, queue, func(q keyspace.Queue, s keyspace.Shard) (int64, error) {
		k := s.Keys()
		res, err := b.run(ctx, trimScript, []string{k.Dead, k.DeadIndex, k.Counts, k.Trimmed}, b.deadCap(q, s), durMS(b.opts.DeadMaxAge))
		n, _ := res.(int64)
		return n, err
	})
}

// deadCap is the dead-record cap of shard s of q: its share of DeadCap, or
// -1 for none.
func (b *Broker) deadCap(q keyspace.Queue, s keyspace.Shard) int {
	if b.opts.DeadCap < 0 {
		return -1
	}
	return q.Share(s.Index(), b.opts.DeadCap)
}

// sumShards adds up op over the shards of queue, stopping at the first
// error (with the sum so far).
func (b *Broker) sumShards(ctx context.Context, queue string, op func(q keyspace.Queue, s keyspace.Shard) (int64, error)) (int64, error) {
	q, err := b.queue(ctx, queue)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, s := range q.Shards() {
		n, err := op(q, s)
		total += n
		if err != nil {
			return total, queueErr(queue, err)
		}
	}
	return total, nil
}
