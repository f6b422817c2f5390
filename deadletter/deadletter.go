package deadletter

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// Inspector reads and manages the dead-letter store of a broker.
type Inspector struct {
	b *broker.Broker
	d protocol.DeadStore // b's dead-letter store
}

// New returns an Inspector over b.
func New(b *broker.Broker) *Inspector { return &Inspector{b: b, d: protocol.Dead(b)} }

// Filter selects dead records. Zero fields match everything.
type Filter struct {
	Type          string    // exact job type
	ErrorContains string    // substring of the final error
	DiedAfter     time.Time // inclusive
	DiedBefore    time.Time // exclusive
}

// match reports whether r passes the filter.
func (f Filter) match(r *job.DeadRecord) bool {
	switch {
	case f.Type != "" && r.Type != f.Type:
		return false
	case f.ErrorContains != "" && !strings.Contains(r.Error, f.ErrorContains):
		return false
	case !f.DiedAfter.IsZero() && r.DiedAt.Before(f.DiedAfter):
		return false
	case !f.DiedBefore.IsZero() && !r.DiedAt.Before(f.DiedBefore):
		return false
	}
	return true
}

// exhausted reports whether every record after r (in newest-first order) is
// too old for the filter.
func (f Filter) exhausted(r *job.DeadRecord) bool {
	return !f.DiedAfter.IsZero() && r.DiedAt.Before(f.DiedAfter)
}

// ListOptions page through dead records.
type ListOptions struct {
	Filter
	Cursor string // from Page.Next; "" starts at the newest
	Limit  int    // records per page; 0 means 50, at most 1,000

	// MaxScan bounds the records one filtered List call reads: a filter is
	// applied in Go to records read newest first, so a filter that matches
	// little would otherwise read the whole store to fill a page. When the
	// budget runs out before the page is full, List returns what matched so
	// far with Page.Partial set and Page.Next continuing the scan where it
	// stopped. 0 means 10,000; negative means no bound. Without a
	// filter a page reads only its own records and is never partial.
	MaxScan int
}

// Page is one page of dead records, newest first.
type Page struct {
	Records []*job.DeadRecord
	Next    string // cursor of the next page; "" when this is the last
	// Partial is set when the scan budget (ListOptions.MaxScan) ran out
	// before the page was full: more matches may follow at Next.
	Partial bool
	// Scanned is how many records the call read and tested against the
	// filter.
	Scanned int
	// Skipped, when listing every queue, names the queues whose records
	// could not be read (a shard count that is not a number, a key of the
	// wrong type) and why: the page holds the other queues' records.
	Skipped map[string]error
}

// defaultLimit and maxLimit bound ListOptions.Limit (and maxLimit
// BulkOptions.Batch).
const (
	defaultLimit = protocol.DeadPageDefault
	maxLimit     = protocol.DeadPageMax
)

// defaultMaxScan is the records one List call reads at most when
// ListOptions.MaxScan is 0. An unfiltered page reads only its own records,
// so the bound matters only for filters.
const defaultMaxScan = protocol.DeadScanDefault

const scanChunk = 200

// List returns a page of dead records that match the filter, newest first:
// those of queue, or of every known queue when queue is "". Records that
// died in the same millisecond are ordered by queue, then id, both
// descending. Paging by cursor has no gaps or repeats, even while jobs die
// or are redriven meanwhile. A call reads at most opts.MaxScan records (see
// ListOptions); a page cut short by that budget is Partial, and its Next
// continues the scan. Bad options give an error wrapping job.ErrInvalid
// (broker.ErrBadCursor for a cursor List did not return).
func (in *Inspector) List(ctx context.Context, queue string, opts ListOptions) (Page, error) {
	limit := opts.Limit
	switch {
	case limit == 0:
		limit = defaultLimit
	case limit < 0 || limit > maxLimit:
		return Page{}, fmt.Errorf("deadletter: %w: limit %d is outside 1..%d", job.ErrInvalid, limit, maxLimit)
	}
	cur, err := decodeCursor(opts.Cursor)
	if err != nil {
		return Page{}, err
	}
	queues, err := in.queues(ctx, queue)
	if err != nil {
		return Page{}, err
	}
	budget := opts.MaxScan
	switch {
	case opts.Filter == (Filter{}):
		budget = -1 // a page reads only its own records
	case budget == 0:
		budget = defaultMaxScan
	}
	chunk := scanChunk
	if budget > 0 && budget < chunk {
		chunk = budget
	}
	streams := make([]*stream, len(queues))
	for i, q := range queues {
		streams[i] = &stream{d: in.d, queue: q, cur: cur.in(q), chunk: chunk}
	}
	var page Page
	for {
		// The next record is the newest head among the queues.
		var best *stream
		for i, s := range streams {
			if s == nil {
				continue
			}
			r, err := s.peek(ctx)
			if err != nil {
				if queue != "" || ctx.Err() != nil {
					return Page{}, err
				}
				// Every queue: one that cannot be read is left out.
				if page.Skipped == nil {
					page.Skipped = map[string]error{}
				}
				page.Skipped[s.queue], streams[i] = err, nil
				if len(page.Skipped) == len(streams) {
					return Page{}, err
				}
				continue
			}
			if r != nil && (best == nil || cursorOf(r).after(cursorOf(best.head()))) {
				best = s
			}
		}
		if best == nil {
			return page, nil
		}
		r := best.pop()
		if opts.exhausted(r) {
			return page, nil
		}
		page.Scanned++
		if opts.match(r) {
			page.Records = append(page.Records, r)
			if len(page.Records) == limit {
				page.Next = cursorOf(r).encode()
				return page, nil
			}
		}
		if budget > 0 && page.Scanned >= budget {
			if !slices.ContainsFunc(streams, func(s *stream) bool { return s != nil && s.more() }) {
				return page, nil // that was the last record
			}
			page.Next, page.Partial = cursorOf(r).encode(), true
			return page, nil
		}
	}
}

// queues returns [queue] after checking it, or every known queue when
// queue is "".
func (in *Inspector) queues(ctx context.Context, queue string) ([]string, error) {
	if queue != "" {
		if err := naming.Queue(queue); err != nil {
			return nil, err
		}
		return []string{queue}, nil
	}
	all, err := protocol.Admin(in.b).Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, q := range all {
		if naming.Queue(q) == nil {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out, nil
}

// stream reads one queue's dead records, newest first, a chunk at a time.
type stream struct {
	d     protocol.DeadStore
	queue string
	cur   protocol.DeadCursor
	chunk int // records per read; 0 means scanChunk
	buf   []*job.DeadRecord
	done  bool
}

// more reports whether records may follow the ones popped so far.
func (s *stream) more() bool { return len(s.buf) > 0 || !s.done }

func (s *stream) peek(ctx context.Context) (*job.DeadRecord, error) {
	n := s.chunk
	if n <= 0 {
		n = scanChunk
	}
	for len(s.buf) == 0 && !s.done {
		recs, next, err := s.d.Page(ctx, s.queue, s.cur, n)
		if err != nil {
			return nil, err
		}
		s.buf, s.cur, s.done = recs, next, next.IsZero()
	}
	return s.head(), nil
}

func (s *stream) head() *job.DeadRecord {
	if len(s.buf) == 0 {
		return nil
	}
	return s.buf[0]
}

func (s *stream) pop() *job.DeadRecord {
	r := s.buf[0]
	s.buf = s.buf[1:]
	return r
}

// cursor is a position in the newest-first order of all queues' dead
// records: died-at descending, then queue, then id, both descending.
type cursor struct {
	diedAt int64 // ms
	queue  string
	id     string
}

func cursorOf(r *job.DeadRecord) cursor {
	return cursor{diedAt: r.DiedAt.UnixMilli(), queue: r.Queue, id: r.ID}
}

// after reports whether c comes before o in the list (is newer).
func (c cursor) after(o cursor) bool {
	if c.diedAt != o.diedAt {
		return c.diedAt > o.diedAt
	}
	if c.queue != o.queue {
		return c.queue > o.queue
	}
	return c.id > o.id
}

// afterEveryID sorts after every id: ids are valid UTF-8, which never holds
// the byte 0xff.
const afterEveryID = "\xff"

// in maps c to queue q's own cursor. A protocol.DeadCursor{t, id} continues
// with the records that died before t, and those of t whose id sorts before
// id.
func (c cursor) in(q string) protocol.DeadCursor {
	t := time.UnixMilli(c.diedAt)
	switch {
	case c.id == "":
		return protocol.DeadCursor{}
	case q == c.queue:
		return protocol.DeadCursor{DiedAt: t, ID: c.id}
	case q > c.queue:
		// Its records of that millisecond came first: continue before it.
		return protocol.DeadCursor{DiedAt: t.Add(-time.Millisecond), ID: afterEveryID}
	default:
		// Its records of that millisecond are still to come.
		return protocol.DeadCursor{DiedAt: t, ID: afterEveryID}
	}
}

func (c cursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.diedAt, 10) + ":" + c.queue + ":" + c.id))
}

func decodeCursor(s string) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	bad := fmt.Errorf("deadletter: %w: %q", broker.ErrBadCursor, s)
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, bad
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 {
		return cursor{}, bad
	}
	v, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || naming.Queue(parts[1]) != nil || naming.ID(parts[2]) != nil {
		return cursor{}, bad
	}
	return cursor{diedAt: v, queue: parts[1], id: parts[2]}, nil
}

// Get returns one dead record, or an error wrapping broker.ErrNotFound.
func (in *Inspector) Get(ctx context.Context, queue, id string) (*job.DeadRecord, error) {
	return in.d.Get(ctx, queue, id)
}

// Redrive sends dead jobs back to the schedule, ready after delay, with their
// attempts reset. It returns an error wrapping broker.ErrNotFound for an id
// that is not dead (any more), and broker.ErrDuplicate for one whose id is
// pending again (its dead record is kept); for several ids, a
// *job.BatchError aligned with ids. Nothing is lost in either case. A call
// whose reply was lost fails with a *broker.CallError wrapping
// broker.ErrOutcomeUnknown: broker.Resend(ctx, err) sends it again and
// answers what it did (nil for a job it redrove, even after that job ran
// again), redriving nothing twice.
func (in *Inspector) Redrive(ctx context.Context, queue string, delay time.Duration, ids ...string) error {
	return in.d.Redrive(ctx, queue, delay, ids...)
}

// Delete removes dead records; unknown ids give errors wrapping
// broker.ErrNotFound (a *job.BatchError for several ids). A lost reply as
// for Redrive: broker.Resend answers nil for a record the call deleted.
func (in *Inspector) Delete(ctx context.Context, queue string, ids ...string) error {
	return in.d.Delete(ctx, queue, ids...)
}

// BulkOptions tune RedriveAll and DeleteAll.
type BulkOptions struct {
	// Delay is how long after the redrive the jobs become ready. 0 means
	// at once. Ignored by DeleteAll.
	Delay time.Duration
	// Batch is the most jobs moved by one script call, so that Redis stays
	// responsive to other clients. 0 means 100, at most 1,000. DeleteAll
	// with an empty Filter deletes no record by record and has no batches.
	Batch int
	// Progress, if not nil, is called after each batch with the running
	// counts.
	Progress func(BulkResult)
}

// BulkResult counts what RedriveAll or DeleteAll did.
type BulkResult struct {
	Done   int   // jobs redriven or deleted
	Failed int   // jobs that were gone meanwhile, or (redrive) pending again
	Err    error // the first per-job error, if any
}

// RedriveAll redrives every dead job of queue (of every queue when queue is
// "") that matches the filter, in batches, with attempts reset. A job that
// fails alone (its record is gone, or its id is pending again) is counted
// in Failed and kept; a batch call whose reply was lost is sent again (up
// to 3 times, broker.Resend: it redrives nothing twice and answers what it
// did); an error that stops the run (Redis unreachable, bad options) is
// returned with the counts so far.
func (in *Inspector) RedriveAll(ctx context.Context, queue string, f Filter, opts BulkOptions) (BulkResult, error) {
	if err := naming.Delay(opts.Delay); err != nil {
		return BulkResult{}, err
	}
	return in.bulk(ctx, queue, f, opts, func(q string, ids []string) error {
		return in.d.Redrive(ctx, q, opts.Delay, ids...)
	})
}

// DeleteAll deletes every dead record of queue (of every queue when queue
// is "") that matches the filter, in batches. See RedriveAll.
//
// With an empty Filter it empties each queue's store whole instead of
// record by record: one transaction per queue (per shard of a sharded
// queue) that counts the records and unlinks the store's two keys, O(1)
// in Redis whatever the number of records (the memory is freed in the
// background). Each store goes at once: a job that dies meanwhile is
// deleted with the others or kept whole, never half; the queues (and the
// shards of a sharded queue) are emptied one after the other, not
// together. Done counts the records deleted, Failed is 0, and Progress is
// called after each queue. A call whose reply was lost returns its error
// with the counts so far; calling DeleteAll again deletes what is left.
func (in *Inspector) DeleteAll(ctx context.Context, queue string, f Filter, opts BulkOptions) (BulkResult, error) {
	if f == (Filter{}) {
		return in.purge(ctx, queue, opts)
	}
	return in.bulk(ctx, queue, f, opts, func(q string, ids []string) error {
		return in.d.Delete(ctx, q, ids...)
	})
}

// purge is DeleteAll with an empty filter: each queue's store emptied in
// one step.
func (in *Inspector) purge(ctx context.Context, queue string, opts BulkOptions) (BulkResult, error) {
	if err := checkBatch(opts.Batch); err != nil {
		return BulkResult{}, err
	}
	queues, err := in.queues(ctx, queue)
	if err != nil {
		return BulkResult{}, err
	}
	var res BulkResult
	for _, q := range queues {
		n, err := in.d.Purge(ctx, q)
		res.Done += int(n)
		if err != nil {
			return res, err
		}
		if opts.Progress != nil {
			opts.Progress(res)
		}
	}
	return res, nil
}

// checkBatch checks BulkOptions.Batch.
func checkBatch(batch int) error {
	if batch < 0 || batch > maxLimit {
		return fmt.Errorf("deadletter: %w: batch %d is outside 1..%d", job.ErrInvalid, batch, maxLimit)
	}
	return nil
}

func (in *Inspector) bulk(ctx context.Context, queue string, f Filter, opts BulkOptions, apply func(q string, ids []string) error) (BulkResult, error) {
	if err := checkBatch(opts.Batch); err != nil {
		return BulkResult{}, err
	}
	batch := opts.Batch
	if batch == 0 {
		batch = 100
	}
	queues, err := in.queues(ctx, queue)
	if err != nil {
		return BulkResult{}, err
	}
	var res BulkResult
	for _, q := range queues {
		var ids []string
		flush := func() error {
			if len(ids) == 0 {
				return nil
			}
			err := apply(q, ids)
			// A call whose reply was lost is sent again as it was (its
			// call id makes the resend answer what the first send did),
			// so that the counts are true.
			for try := 0; try < bulkResends && unsure(err) && ctx.Err() == nil; try++ {
				err = broker.Resend(ctx, err)
			}
			failed := perJobFailures(err, len(ids))
			if failed < 0 {
				return err
			}
			if res.Err == nil && err != nil {
				res.Err = err
			}
			res.Done += len(ids) - failed
			res.Failed += failed
			ids = ids[:0]
			if opts.Progress != nil {
				opts.Progress(res)
			}
			return nil
		}
		s := &stream{d: in.d, queue: q}
		for {
			r, err := s.peek(ctx)
			if err != nil {
				return res, err
			}
			if r == nil || f.exhausted(r) {
				break
			}
			s.pop()
			if !f.match(r) {
				continue
			}
			ids = append(ids, r.ID)
			if len(ids) == batch {
				if err := flush(); err != nil {
					return res, err
				}
			}
		}
		if err := flush(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// bulkResends is how many times RedriveAll and DeleteAll send a batch call
// again whose reply was lost before they stop.
const bulkResends = 3

// unsure reports whether err leaves a call's outcome open: its reply was
// lost, or the replicas did not confirm it (broker.Resend settles it).
func unsure(err error) bool {
	return errors.Is(err, broker.ErrOutcomeUnknown) || errors.Is(err, broker.ErrNotReplicated)
}

// perJobFailures counts the failed jobs of a batch call's error, or returns
// -1 when err is not about single jobs (Redis is unreachable, say, or the
// outcome of the call is still open).
func perJobFailures(err error, n int) int {
	if err == nil {
		return 0
	}
	if unsure(err) {
		return -1
	}
	var be *job.BatchError
	if errors.As(err, &be) {
		failed := 0
		for _, e := range be.Errs {
			if e != nil {
				failed++
			}
		}
		return failed
	}
	if n == 1 && (errors.Is(err, broker.ErrNotFound) || errors.Is(err, broker.ErrDuplicate)) {
		return 1
	}
	return -1
}

// Count returns how many dead records of queue (of every queue when queue
// is "") match the filter. Without a filter it reads every queue's count in
// O(1), in one round trip (Broker.Stats); with one it reads the records.
func (in *Inspector) Count(ctx context.Context, queue string, f Filter) (int64, error) {
	queues, err := in.queues(ctx, queue)
	if err != nil {
		return 0, err
	}
	var n int64
	if f == (Filter{}) {
		if len(queues) == 0 {
			return 0, nil // Stats of no queue would read every queue
		}
		all, err := in.b.Stats(ctx, queues...)
		if err != nil {
			return 0, err
		}
		for _, s := range all {
			n += s.Dead
		}
		return n, nil
	}
	for _, q := range queues {
		s := &stream{d: in.d, queue: q}
		for {
			r, err := s.peek(ctx)
			if err != nil {
				return 0, err
			}
			if r == nil || f.exhausted(r) {
				break
			}
			if f.match(s.pop()) {
				n++
			}
		}
	}
	return n, nil
}

// Trim applies the broker's retention rules (broker.Options.DeadCap and
// DeadMaxAge) to queue (to every queue when queue is "") now, and returns
// how many records were dropped. Workers apply them each time a job dies;
// Trim also drops records that aged out in a queue where nothing died since.
// The records it drops are counted as trims (job.QueueStats.DeadTrimmedCap,
// DeadTrimmedAge) and are not handed to any worker's OnDeadTrimmed hook.
func (in *Inspector) Trim(ctx context.Context, queue string) (int64, error) {
	return in.eachQueue(ctx, queue, in.d.Trim)
}

func (in *Inspector) eachQueue(ctx context.Context, queue string, f func(context.Context, string) (int64, error)) (int64, error) {
	queues, err := in.queues(ctx, queue)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, q := range queues {
		n, err := f(ctx, q)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
