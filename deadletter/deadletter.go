package deadletter

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
)

// Inspector reads and manages the dead-letter store of a broker.
type Inspector struct {
	b *broker.Broker
}

// New returns an Inspector over b.
func New(b *broker.Broker) *Inspector { return &Inspector{b: b} }

// Filter selects dead records. Zero fields match everything.
type Filter struct {
	Type          string    // exact job type
	ErrorContains string    // substring of the final error
	DiedAfter     time.Time // inclusive
	DiedBefore    time.Time // exclusive
}

// Match reports whether r passes the filter.
func (f Filter) Match(r *broker.DeadRecord) bool {
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

// ListOptions page through a queue's dead records.
type ListOptions struct {
	Filter
	Cursor string // from Page.Next; "" starts at the newest
	Limit  int    // records per page; 0 means 50, at most 1,000
}

// Page is one page of dead records, newest first.
type Page struct {
	Records []*broker.DeadRecord
	Next    string // cursor of the next page; "" when this is the last
}

// ErrBadCursor is wrapped when a cursor was not made by List.
var ErrBadCursor = errors.New("deadletter: malformed cursor")

const scanChunk = 200

// List returns a page of the queue's dead records that match the filter,
// newest first. Paging by cursor has no gaps or repeats, even while jobs die
// or are redriven meanwhile.
func (in *Inspector) List(ctx context.Context, queue string, opts ListOptions) (Page, error) {
	limit := opts.Limit
	switch {
	case limit == 0:
		limit = 50
	case limit < 0 || limit > 1000:
		return Page{}, fmt.Errorf("deadletter: %w: limit %d is outside 1..1000", job.ErrInvalid, limit)
	}
	cur, err := decodeCursor(opts.Cursor)
	if err != nil {
		return Page{}, err
	}
	var out []*broker.DeadRecord
	for {
		recs, next, err := in.b.DeadPage(ctx, queue, cur, scanChunk)
		if err != nil {
			return Page{}, err
		}
		for _, r := range recs {
			if !opts.Match(r) {
				continue
			}
			out = append(out, r)
			if len(out) == limit {
				return Page{Records: out, Next: encodeCursor(broker.DeadCursor{DiedAt: r.DiedAt, ID: r.ID})}, nil
			}
		}
		if next.IsZero() {
			return Page{Records: out}, nil
		}
		cur = next
	}
}

func encodeCursor(c broker.DeadCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.DiedAt.UnixMilli(), 10) + ":" + c.ID))
}

func decodeCursor(s string) (broker.DeadCursor, error) {
	if s == "" {
		return broker.DeadCursor{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return broker.DeadCursor{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	msPart, id, ok := strings.Cut(string(raw), ":")
	v, err := strconv.ParseInt(msPart, 10, 64)
	if !ok || err != nil || id == "" {
		return broker.DeadCursor{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return broker.DeadCursor{DiedAt: time.UnixMilli(v), ID: id}, nil
}

// Get returns one dead record, or an error wrapping broker.ErrNotFound.
func (in *Inspector) Get(ctx context.Context, queue, id string) (*broker.DeadRecord, error) {
	return in.b.DeadGet(ctx, queue, id)
}

// Redrive sends dead jobs back to the schedule, ready after delay, with their
// attempts reset. It returns an error wrapping broker.ErrNotFound for an id
// that is not dead, and broker.ErrDuplicate for one whose id is pending
// again (its dead record is kept); for several ids, a *job.BatchError.
func (in *Inspector) Redrive(ctx context.Context, queue string, delay time.Duration, ids ...string) error {
	return in.b.Redrive(ctx, queue, delay, ids...)
}

// RedriveResult counts what RedriveAll did.
type RedriveResult struct {
	Redriven int
	Failed   int   // not found any more, or pending again
	Err      error // the first per-job error, if any
}

// RedriveAll redrives every dead record of queue that matches the filter, in
// batches of at most batch jobs (0 means 100) so that Redis stays responsive.
// progress, if not nil, is called after each batch with the running counts.
func (in *Inspector) RedriveAll(ctx context.Context, queue string, f Filter, delay time.Duration, batch int, progress func(RedriveResult)) (RedriveResult, error) {
	if batch <= 0 {
		batch = 100
	}
	var res RedriveResult
	var cur broker.DeadCursor
	var ids []string
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		err := in.b.Redrive(ctx, queue, delay, ids...)
		failed := perJobFailures(err, len(ids))
		if failed < 0 {
			return err
		}
		if res.Err == nil && err != nil {
			res.Err = err
		}
		res.Redriven += len(ids) - failed
		res.Failed += failed
		ids = ids[:0]
		if progress != nil {
			progress(res)
		}
		return nil
	}
	for {
		recs, next, err := in.b.DeadPage(ctx, queue, cur, scanChunk)
		if err != nil {
			return res, err
		}
		for _, r := range recs {
			if f.Match(r) {
				ids = append(ids, r.ID)
				if len(ids) == batch {
					if err := flush(); err != nil {
						return res, err
					}
				}
			}
		}
		if next.IsZero() {
			return res, flush()
		}
		cur = next
	}
}

// perJobFailures counts the failed jobs of a batch call's error, or returns
// -1 when err is not about single jobs (Redis is unreachable, say).
func perJobFailures(err error, n int) int {
	if err == nil {
		return 0
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

// Delete removes dead records; unknown ids give errors wrapping
// broker.ErrNotFound.
func (in *Inspector) Delete(ctx context.Context, queue string, ids ...string) error {
	return in.b.DeadDelete(ctx, queue, ids...)
}

// Purge removes every dead record of queue and returns how many there were.
func (in *Inspector) Purge(ctx context.Context, queue string) (int64, error) {
	return in.b.DeadPurge(ctx, queue)
}

// Trim applies the broker's retention rules now and returns how many records
// were dropped.
func (in *Inspector) Trim(ctx context.Context, queue string) (int64, error) {
	return in.b.DeadTrim(ctx, queue)
}
