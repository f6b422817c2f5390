package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// Batches: a group of jobs, in any queues, whose end fires callback jobs
// once. See docs/batches.md for the model and its guarantees.

var (
	// ErrBatchNotFound: no batch with the id (or its record has expired).
	ErrBatchNotFound = errors.New("broker: batch not found")
	// ErrBatchSealed: the batch takes no more members.
	ErrBatchSealed = errors.New("broker: batch is sealed")
)

// defaultBatchKeep is how long a batch's record is kept after its callbacks
// fired, when BatchSpec.Keep is 0.
const defaultBatchKeep = admin.DefaultBatchKeep

// batchHeader is the header a batch's callback jobs carry: the batch id.
// docs/batches.md names it for users (TestBatchHeaderInDoc).
const batchHeader = "delayq-batch"

// BatchSpec describes a new batch.
type BatchSpec struct {
	ID         string        // generated (job.NewID) when empty; 1 to 128 bytes of letters, digits and "._-:"
	OnSuccess  *job.Envelope // optional: enqueued once, when every member succeeded, as job "<batch id>:success"
	OnComplete *job.Envelope // optional: enqueued once, when every member ended (succeeded or dead), as job "<batch id>:complete"
	// Keep is how long the batch's record is kept once it is complete
	// and its callbacks fired; 0 means 7 days. It is also how
	// long a callback's id is remembered (job.UniqueFor), so that a
	// repeated enqueue of it is refused.
	Keep time.Duration
}

// BatchStatus is a batch read at one instant.
type BatchStatus struct {
	ID         string
	CreatedAt  time.Time
	Sealed     bool // no more members; complete once every member ended
	Complete   bool // sealed, and every member ended (Pending is 0)
	Total      int  // members added
	Pending    int  // Total - Succeeded - Dead - Gone
	Succeeded  int
	Dead       int    // members that ended in the dead-letter store; one redriven that succeeds moves to Succeeded
	Gone       int    // members that ended without success and without a dead record: cancelled before they ran (Cancel), or expired with job.DropExpired
	OnSuccess  string // "queue/id" of the success callback ("" when none); the id is "<batch>:success"
	OnComplete string // "queue/id" of the complete callback ("" when none); the id is "<batch>:complete"
	// SuccessFired and CompleteFired: the callback was enqueued. Each is
	// marked right after its enqueue (the two are in different slots), so
	// a callback may start to run a moment before its mark is set; a crash
	// between the two is repaired by the next seal or sweep, whose enqueue
	// of the same callback id changes nothing.
	SuccessFired  bool
	CompleteFired bool
	ExpiresAt     time.Time // when the record goes; zero until the batch is complete and its callbacks fired
	CompletedAt   time.Time // when the batch was first found complete (the server's clock); a callback's delay counts from then
}

// successID and completeID are the ids of batch id's callback jobs, as
// BatchSpec states them.
func successID(id string) string  { return id + ":success" }
func completeID(id string) string { return id + ":complete" }

func (b *Broker) batchKeys(id string) []string {
	k := keyspace.Batch(b.ns, id)
	return []string{k.Meta, k.Members, k.Next}
}

// callback prepares a batch callback for storing: its id is derived from
// the batch's, it is Unique for keep, and it names the batch in a header.
// ready is how batch_end times it: "<at ms>,<delay ms>,<expiry window
// ms>": its own ready time (job.At), else its delay (job.In) counted from
// the batch's completion, and its expiry (job.ExpireAt, ExpireIn) kept the
// same distance after its ready time as declared here.
func (b *Broker) callback(env *job.Envelope, id string, keep time.Duration, now time.Time) (queue string, body []byte, ready string, err error) {
	if env == nil {
		return "", nil, "", nil
	}
	switch {
	case env.Batch != "":
		return "", nil, "", fmt.Errorf("broker: %w: a batch callback cannot itself be a batch member (batch %q)", job.ErrInvalid, env.Batch)
	case env.Replace:
		return "", nil, "", fmt.Errorf("broker: %w: a batch callback cannot replace a job (job.Replace); it is a new job with the id %q", job.ErrInvalid, id)
	case env.Debounce != 0:
		return "", nil, "", fmt.Errorf("broker: %w: a batch callback cannot be debounced (job.Debounce); it is a new job with the id %q", job.ErrInvalid, id)
	case env.Unique:
		return "", nil, "", fmt.Errorf("broker: %w: a batch callback cannot set job.Unique: it is unique by its id %q for the batch's Keep", job.ErrInvalid, id)
	}
	cb := *env
	cb.ID, cb.Unique, cb.UniqueFor, cb.UniqueDead, cb.Replace = id, true, keep, true, false
	cb.Headers = make(map[string]string, len(env.Headers)+1)
	for k, v := range env.Headers {
		cb.Headers[k] = v
	}
	cb.Headers[batchHeader] = id[:strings.LastIndexByte(id, ':')]
	body, err = b.prepare(&cb, now)
	if err != nil {
		return "", nil, "", err
	}
	var at, window int64
	if !cb.At.IsZero() {
		at = readyMS(cb.At)
	}
	if !cb.ExpireAt.IsZero() {
		from := cb.At
		if from.IsZero() {
			from = now.Add(cb.Delay)
		}
		window = max(cb.ExpireAt.Sub(from).Milliseconds(), 1)
	}
	delay := (cb.Delay + time.Millisecond - 1).Milliseconds()
	return cb.Queue, body, fmt.Sprintf("%d,%d,%d", at, delay, window), nil
}

// CreateBatch stores a new open batch and returns its id: add members
// with AddToBatch, then SealBatch. Errors wrap job.ErrInvalid (a bad id,
// Keep or callback, named) or ErrDuplicate (the id is taken); nothing is
// stored then.
func (b *Broker) CreateBatch(ctx context.Context, spec BatchSpec) (string, error) {
	id := spec.ID
	if id == "" {
		id = job.NewID()
	}
	if err := naming.BatchID(id); err != nil {
		return "", fmt.Errorf("broker: create batch: %w", err)
	}
	if spec.Keep < 0 {
		return "", fmt.Errorf("broker: create batch %q: %w: keep %s is negative", id, job.ErrInvalid, spec.Keep)
	}
	keep := spec.Keep
	if keep == 0 {
		keep = defaultBatchKeep
	}
	now := b.createdNow()
	sq, sb, sr, err := b.callback(spec.OnSuccess, successID(id), keep, now)
	if err != nil {
		return "", fmt.Errorf("broker: create batch %q: success callback: %w", id, err)
	}
	cq, cbody, cr, err := b.callback(spec.OnComplete, completeID(id), keep, now)
	if err != nil {
		return "", fmt.Errorf("broker: create batch %q: complete callback: %w", id, err)
	}
	res, err := b.run(ctx, batchCreateScript, b.batchKeys(id), sq, sb, cq, cbody, durMS(keep), sr, cr)
	if err != nil {
		return "", fmt.Errorf("broker: create batch %q: %w", id, err)
	}
	v, err := int64s(res, 2)
	if err != nil {
		return "", fmt.Errorf("broker: create batch %q: %w", id, err)
	}
	if v[0] == 0 {
		return "", fmt.Errorf("%w: batch %q exists", ErrDuplicate, id)
	}
	// Second step, in the index's own slot: a crash here leaves a batch
	// that works but is not listed (Batch still finds it).
	if err := b.rdb.ZAdd(ctx, keyspace.BatchesKey(b.ns), redis.Z{Score: float64(v[1]), Member: id}).Err(); err != nil {
		return id, fmt.Errorf("broker: create batch %q: stored, but not listed: %w", id, err)
	}
	return id, nil
}

// batchAddChunk bounds the members one batch_add call counts.
const batchAddChunk = 1000

// AddToBatch makes members part of the open batch id and enqueues them,
// as Enqueue does; each envelope gets Batch = id (and its ID, Queue and
// CreatedAt, as with Enqueue). Members are counted into the batch first,
// then enqueued, so a member cannot end before it is counted. A call that
// returned an error may be made again with the same envelopes (the same
// IDs: give members ids of your own, or keep the envelopes): members that
// are counted already are not counted again, and a member found already
// enqueued is taken as enqueued by the earlier call.
//
// Errors: job.ErrInvalid for a bad batch id or envelope (nothing stored),
// ErrBatchNotFound, ErrBatchSealed (nothing stored), or a *job.BatchError
// aligned with members (a member whose id is pending elsewhere is taken
// back out of the batch and fails with ErrDuplicate).
func (b *Broker) AddToBatch(ctx context.Context, id string, members ...*job.Envelope) error {
	return b.addToBatch(ctx, id, "+", members)
}

// addToBatch is AddToBatch, or with mode "<" .. "<queue>\n<id>" of a
// member (batch_add.lua) the adding of that member's next jobs.
func (b *Broker) addToBatch(ctx context.Context, id, mode string, members []*job.Envelope) error {
	if err := naming.BatchID(id); err != nil {
		return fmt.Errorf("broker: add to batch: %w", err)
	}
	if len(members) == 0 {
		return nil
	}
	now := b.createdNow()
	fields := make([]any, len(members))
	seen := make(map[string]bool, len(members))
	for i, env := range members {
		if env == nil {
			return fmt.Errorf("broker: add to batch %q: %w: member %d of %d is nil", id, job.ErrInvalid, i+1, len(members))
		}
		if env.Batch != "" && env.Batch != id {
			return fmt.Errorf("broker: add to batch %q: %w: member %d of %d (%q) is of batch %q", id, job.ErrInvalid, i+1, len(members), env.ID, env.Batch)
		}
		if env.Replace {
			return fmt.Errorf("broker: add to batch %q: %w: member %d of %d (%q) asks to replace a job; a member is a new job", id, job.ErrInvalid, i+1, len(members), env.ID)
		}
		if env.Debounce != 0 {
			return fmt.Errorf("broker: add to batch %q: %w: member %d of %d (%q) is debounced (job.Debounce); a member is a new job", id, job.ErrInvalid, i+1, len(members), env.ID)
		}
		env.Batch = id
		if _, err := b.prepare(env, now); err != nil {
			env.Batch = ""
			return fmt.Errorf("broker: add to batch %q: member %d of %d: %w", id, i+1, len(members), err)
		}
		f := env.Queue + "\n" + env.ID
		if seen[f] {
			return fmt.Errorf("broker: add to batch %q: %w: member %q of queue %q is listed twice", id, job.ErrInvalid, env.ID, env.Queue)
		}
		seen[f] = true
		fields[i] = f
	}
	added := make([]bool, len(members))
	for start := 0; start < len(fields); start += batchAddChunk {
		part := fields[start:min(start+batchAddChunk, len(fields))]
		res, err := b.run(ctx, batchAddScript, b.batchKeys(id), append([]any{mode}, part...)...)
		if err != nil {
			return fmt.Errorf("broker: add to batch %q: %w", id, err)
		}
		list, _ := res.([]any)
		v, err := int64s(res, len(list))
		if err != nil {
			return fmt.Errorf("broker: add to batch %q: %w", id, err)
		}
		switch {
		case len(v) > 0 && v[0] == -1:
			return fmt.Errorf("%w: %q", ErrBatchNotFound, id)
		case len(v) > 0 && v[0] == -2:
			return fmt.Errorf("%w: %q; no member was added", ErrBatchSealed, id)
		case len(v) > 0 && v[0] == -3:
			return fmt.Errorf("broker: add to batch %q: %w: the member whose next jobs these are (%s) succeeded already, or is no member", id, ErrLeaseLost, strings.ReplaceAll(mode[1:], "\n", "/"))
		case len(v) != len(part)+1:
			return fmt.Errorf("broker: add to batch %q: unexpected reply %v", id, res)
		}
		for j := range part {
			added[start+j] = v[j+1] == 1
		}
	}
	err := b.Enqueue(ctx, members...)
	if err == nil {
		return nil
	}
	errs := make([]error, len(members))
	var be *job.BatchError
	if len(members) > 1 && errors.As(err, &be) && len(be.Errs) == len(members) {
		copy(errs, be.Errs)
	} else {
		for i := range errs {
			errs[i] = err
		}
	}
	if mode != "+" {
		// Next jobs: a duplicate was enqueued by an earlier success of
		// their member (Chain), and stays counted.
		return batchErr(errs)
	}
	var back []any
	for i, e := range errs {
		if !errors.Is(e, ErrDuplicate) {
			continue
		}
		if !added[i] {
			errs[i] = nil // enqueued by an earlier call that counted it
			continue
		}
		back = append(back, fields[i])
	}
	if len(back) > 0 {
		if _, err := b.run(ctx, batchAddScript, b.batchKeys(id), append([]any{"-"}, back...)...); err != nil {
			return fmt.Errorf("broker: add to batch %q: a member's id is taken, and taking it back out failed: %w", id, err)
		}
		// A rejected member is an ending of its own: a batch sealed
		// meanwhile may be complete without it, and fires now.
		if err := b.endBatch(ctx, id, false, nil); err != nil {
			return fmt.Errorf("broker: add to batch %q: a member's id is taken; it was taken back out, but the batch was not checked for completion: %w", id, err)
		}
	}
	return batchErr(errs)
}

// SealBatch closes batch id to new members: it is complete once every
// member ended (at once when all already have), and its callbacks are
// enqueued then. Sealing a sealed batch changes nothing but enqueues a
// due callback that a crash left unenqueued. Errors wrap ErrBatchNotFound,
// or job.ErrInvalid for a bad id.
func (b *Broker) SealBatch(ctx context.Context, id string) error {
	if err := naming.BatchID(id); err != nil {
		return fmt.Errorf("broker: seal batch: %w", err)
	}
	return b.endBatch(ctx, id, true, nil)
}

// endBatch counts endings (member field, "s", "d" or "x" pairs) into
// batch id, sealing it first when seal is set, and enqueues the callbacks
// that are due. It returns nil for a batch that does not exist when only
// endings were given (a batch whose record expired counts nothing).
func (b *Broker) endBatch(ctx context.Context, id string, seal bool, pairs []any) error {
	args := append([]any{flag(seal)}, pairs...)
	res, err := b.run(ctx, batchEndScript, b.batchKeys(id), args...)
	if err != nil {
		return fmt.Errorf("broker: batch %q: %w", id, err)
	}
	parts, ok := res.([]any)
	if ok && len(parts) == 1 {
		if seal {
			return fmt.Errorf("%w: %q", ErrBatchNotFound, id)
		}
		return nil
	}
	if !ok || len(parts) != 11 {
		return fmt.Errorf("broker: batch %q: unexpected reply %v", id, res)
	}
	str := func(i int) string { s, _ := parts[i].(string); return s }
	for _, cb := range []struct{ queue, body, ready, id, mark string }{
		{str(4), str(5), str(8), successID(id), "s"},
		{str(6), str(7), str(9), completeID(id), "c"},
	} {
		if cb.queue == "" {
			continue
		}
		if err := b.fireCallback(ctx, id, cb.queue, cb.id, cb.body, cb.ready); err != nil {
			return err
		}
		if _, err := b.run(ctx, batchFiredScript, b.batchKeys(id), cb.mark); err != nil {
			return fmt.Errorf("broker: batch %q: callback %q enqueued, not marked: %w", id, cb.id, err)
		}
	}
	return nil
}

type callbackMWKey struct{}

// WithCallbackMiddleware returns ctx carrying producer middleware for the
// batch callbacks a call with ctx enqueues (SealBatch, AddToBatch, a
// cancel, and the worker's endings and sweeps, whichever completes the
// batch): each callback goes through mws, the first
// outermost, just before it is stored, e.g. so that
// middleware.EnqueueMetrics counts it. A worker passes its
// Options.Enqueue so. A repeat of a callback enqueued already is refused as
// a duplicate (ErrDuplicate), which is no error of the batch.
func WithCallbackMiddleware(ctx context.Context, mws ...job.EnqueueMiddleware) context.Context {
	return context.WithValue(ctx, callbackMWKey{}, mws)
}

// fireCallback enqueues the due callback cid of batch id: body as stored
// by CreateBatch, ready as batch_end timed it ("<ready ms>\n<expiry ms or
// 0>"). A repeat (the callback was enqueued, but not marked fired: a
// crash, a Redis error) is refused as a duplicate: the callback is
// enqueued once. One the broker refuses for good (job.ErrInvalid: its
// stored body no longer decodes, or exceeds today's MaxPayloadBytes) is
// dead-lettered in its queue with the reason, so that the batch ends
// rather than trying again at every ending and sweep; it counts as fired.
func (b *Broker) fireCallback(ctx context.Context, id, queue, cid, body, ready string) error {
	env, err := job.Decode([]byte(body))
	if err == nil {
		env.ID, env.Queue = cid, queue
		var at, expiry int64
		if _, serr := fmt.Sscanf(ready, "%d\n%d", &at, &expiry); serr == nil && at > 0 {
			env.At, env.Delay = fromMS(at), 0
			if expiry > 0 {
				env.ExpireAt = fromMS(expiry)
			}
		}
		if mws, _ := ctx.Value(callbackMWKey{}).([]job.EnqueueMiddleware); len(mws) > 0 {
			err = job.ChainEnqueuer(b, mws...).Enqueue(ctx, env)
		} else {
			err = b.Enqueue(ctx, env)
		}
		if err == nil || errors.Is(err, ErrDuplicate) {
			return nil
		}
	}
	if !errors.Is(err, job.ErrInvalid) && !errors.Is(err, job.ErrCorrupt) {
		return fmt.Errorf("broker: batch %q: callback %q: %w", id, cid, err)
	}
	if derr := b.deadCallback(ctx, queue, cid, body, fmt.Sprintf("batch %q: callback not enqueued: %v", id, err)); derr != nil {
		return fmt.Errorf("broker: batch %q: callback %q refused (%v), and dead-lettering it failed: %w", id, cid, err, derr)
	}
	return nil
}

// deadCallback dead-letters the batch callback cid of queue, never
// stored as pending, with body and the reason why.
func (b *Broker) deadCallback(ctx context.Context, queue, cid, body, why string) error {
	q, err := b.queue(ctx, queue)
	if err != nil {
		return err
	}
	s := q.Route(cid)
	typ := ""
	if env, err := job.Decode([]byte(body)); err == nil {
		typ = env.Type
	}
	rec, err := marshalDead(&job.DeadRecord{ID: cid, Queue: queue, Type: typ, Body: []byte(body), Error: why, Reason: ReasonCallbackRefused})
	if err != nil {
		return err
	}
	k := s.Keys()
	if _, err := b.run(ctx, deadAddScript, []string{k.Dead, k.DeadIndex, k.Hist, k.Counts, k.Trimmed}, cid, rec, b.deadCap(q, s), durMS(b.opts.DeadMaxAge)); err != nil {
		return queueErr(queue, err)
	}
	return nil
}

// Batch returns the status of batch id: an error wrapping
// ErrBatchNotFound when there is none (or its record has expired), or
// job.ErrInvalid for a bad id.
func (b *Broker) Batch(ctx context.Context, id string) (*BatchStatus, error) {
	if err := naming.BatchID(id); err != nil {
		return nil, fmt.Errorf("broker: batch: %w", err)
	}
	m, err := b.rdb.HGetAll(ctx, keyspace.Batch(b.ns, id).Meta).Result()
	if err != nil {
		return nil, fmt.Errorf("broker: batch %q: %w", id, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrBatchNotFound, id)
	}
	return batchStatus(id, m), nil
}

func batchStatus(id string, m map[string]string) *BatchStatus {
	num := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
	s := &BatchStatus{
		ID:            id,
		CreatedAt:     fromMS(num("created")),
		Sealed:        m["sealed"] == "1",
		Total:         int(num("total")),
		Succeeded:     int(num("succeeded")),
		Dead:          int(num("dead")),
		Gone:          int(num("gone")),
		SuccessFired:  m["sf"] == "1",
		CompleteFired: m["cf"] == "1",
	}
	s.Pending = s.Total - s.Succeeded - s.Dead - s.Gone
	s.Complete = s.Sealed && s.Pending == 0
	if q := m["sq"]; q != "" {
		s.OnSuccess = q + "/" + successID(id)
	}
	if q := m["cq"]; q != "" {
		s.OnComplete = q + "/" + completeID(id)
	}
	if v := num("expires"); v > 0 {
		s.ExpiresAt = fromMS(v)
	}
	if v := num("done"); v > 0 {
		s.CompletedAt = fromMS(v)
	}
	return s
}

// maxBatchesPage is the most batches one Batches call returns.
const maxBatchesPage = admin.MaxBatchesPage

// BatchPage is one page of batches, newest first.
type BatchPage struct {
	Batches []*BatchStatus
	// Next is the cursor of the next page, "" when this is the last: an
	// opaque token of URL-safe characters, as JobPage.Next.
	Next string
}

// Batches lists batches, newest first: up to limit (1 to 1,000)
// after the cursor ("" for the first page, else a page's Next). Batches
// whose record expired are dropped from the list as they are met, and
// batches created meanwhile cause no gaps or repeats among the others.
// Errors wrap job.ErrInvalid for a bad limit, ErrBadCursor for a cursor no
// page returned.
func (b *Broker) Batches(ctx context.Context, cursor string, limit int) (BatchPage, error) {
	if limit < 1 || limit > maxBatchesPage {
		return BatchPage{}, fmt.Errorf("broker: batches: %w: limit %d must be 1 to %d", job.ErrInvalid, limit, maxBatchesPage)
	}
	after, err := parseBatchCursor(cursor)
	if err != nil {
		return BatchPage{}, err
	}
	key := keyspace.BatchesKey(b.ns)
	// Newest first: by created time, then by id, both descending. After
	// the cursor: created before it, or at its time with a smaller id (the
	// batches created in its millisecond with an id at or above it are
	// skipped: one read of that millisecond's batches).
	by := &redis.ZRangeBy{Max: "+inf", Min: "-inf", Count: int64(limit) + 1}
	if after.id != "" {
		at := strconv.FormatInt(after.at, 10)
		same, err := b.rdb.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: at, Max: at}).Result()
		if err != nil {
			return BatchPage{}, fmt.Errorf("broker: batches: %w", err)
		}
		for _, id := range same {
			if id >= after.id {
				by.Offset++
			}
		}
		by.Max = at
	}
	ids, err := b.rdb.ZRevRangeByScoreWithScores(ctx, key, by).Result()
	if err != nil {
		return BatchPage{}, fmt.Errorf("broker: batches: %w", err)
	}
	var page BatchPage
	if len(ids) > limit {
		last := ids[limit-1]
		page.Next = jobCursor{at: int64(last.Score), id: last.Member.(string)}.String()
		ids = ids[:limit]
	}
	page.Batches = make([]*BatchStatus, 0, len(ids))
	var gone []any
	for _, z := range ids {
		id := z.Member.(string)
		s, err := b.Batch(ctx, id)
		if errors.Is(err, ErrBatchNotFound) || errors.Is(err, job.ErrInvalid) {
			gone = append(gone, id)
			continue
		}
		if err != nil {
			return BatchPage{}, err
		}
		page.Batches = append(page.Batches, s)
	}
	if len(gone) > 0 {
		if err := b.rdb.ZRem(ctx, key, gone...).Err(); err != nil {
			return BatchPage{}, fmt.Errorf("broker: batches: %w", err)
		}
	}
	return page, nil
}

// parseBatchCursor reads a BatchPage.Next: a position (created ms, id) in
// the batches, in the form of a job page's cursor.
func parseBatchCursor(s string) (jobCursor, error) {
	c, err := parseJobCursor(s)
	if err == nil && c.id != "" && naming.BatchID(c.id) != nil {
		return jobCursor{}, fmt.Errorf("broker: %w", ErrBadCursor)
	}
	return c, err
}

// EndBatch counts the endings of batch members of shard s, recorded by
// Settle with their ack or kill, into their batches (enqueueing the
// callbacks that are due), then drops the records. Repeating it is
// harmless: a batch counts a member's ending once.
func (w workerSide) EndBatch(ctx context.Context, s keyspace.Shard, ends []protocol.BatchEnd) error {
	return w.b.endBatches(ctx, s, ends)
}

func (b *Broker) endBatches(ctx context.Context, s keyspace.Shard, ends []protocol.BatchEnd) error {
	var order []string
	by := map[string][]any{}
	var clear []any
	for _, e := range ends {
		if naming.BatchID(e.Batch) != nil {
			clear = append(clear, e.ID, e.Batch+"\n"+e.Ending())
			continue
		}
		if _, ok := by[e.Batch]; !ok {
			order = append(order, e.Batch)
		}
		by[e.Batch] = append(by[e.Batch], s.Queue()+"\n"+e.ID, e.Ending())
	}
	var first error
	for _, id := range order {
		if err := b.endBatch(ctx, id, false, by[id]); err != nil {
			first = cmpErr(first, err)
			continue
		}
		for i := 0; i < len(by[id]); i += 2 {
			f := by[id][i].(string)
			clear = append(clear, f[strings.IndexByte(f, '\n')+1:], id+"\n"+by[id][i+1].(string))
		}
	}
	if len(clear) > 0 {
		if _, err := b.run(ctx, batchClearScript, []string{s.Keys().Batched}, clear...); err != nil {
			first = cmpErr(first, queueErr(s.Queue(), err))
		}
	}
	return first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// countEndings counts the endings of ids recorded in shard s (a cancel
// that removed them) into their batches at once, rather than at the next
// sweep. A failure leaves the records for the sweep.
func (b *Broker) countEndings(ctx context.Context, s keyspace.Shard, ids ...string) error {
	vals, err := b.rdb.HMGet(ctx, s.Keys().Batched, ids...).Result()
	if err != nil {
		return queueErr(s.Queue(), err)
	}
	var ends []protocol.BatchEnd
	for i, v := range vals {
		if rec, ok := v.(string); ok {
			if e, ok := protocol.ParseBatchEnd(ids[i], rec); ok {
				ends = append(ends, e)
			}
		}
	}
	if len(ends) == 0 {
		return nil
	}
	return b.endBatches(ctx, s, ends)
}

// SweepBatches counts endings of batch members of shard s that were
// recorded but not yet counted (their worker died between its settle and
// its EndBatch): up to limit of them. It returns how many it found.
func (w workerSide) SweepBatches(ctx context.Context, s keyspace.Shard, limit int) (int, error) {
	key := s.Keys().Batched
	kv, _, err := w.b.rdb.HScan(ctx, key, 0, "", int64(limit)).Result()
	if err != nil {
		return 0, queueErr(s.Queue(), w.b.wrongType(ctx, key, "hash", err))
	}
	ends := make([]protocol.BatchEnd, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		if e, ok := protocol.ParseBatchEnd(kv[i], kv[i+1]); ok {
			ends = append(ends, e)
		}
	}
	if len(ends) == 0 {
		return 0, nil
	}
	return len(ends), w.b.endBatches(ctx, s, ends)
}
