package broker

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

func newJobInfo(queue, id string, state job.JobState, now, at time.Time, attempts int64, body []byte) *job.JobInfo {
	j := &job.JobInfo{ID: id, Queue: queue, State: state, Now: now, Attempts: int(attempts), Body: body}
	switch state {
	case job.StateScheduled:
		j.ReadyAt = at
	case job.StateProcessing:
		j.LeaseDeadline = at
	}
	env, err := job.Decode(body)
	if err != nil {
		j.Err = fmt.Errorf("job %q in queue %q: %w", id, queue, err)
		return j
	}
	env.ID, env.Queue = id, queue
	if state == job.StateScheduled {
		env.ReadyAt = at
	}
	j.Envelope = env
	return j
}

// Job returns the job id of queue: scheduled, processing (with the last
// progress its handler reported), dead, or succeeded and retained
// (job.Retain: with its result, attempts, start, finish and expiry), with
// its envelope, its ready time or lease deadline, and its attempts. It
// returns an error wrapping ErrNotFound when the queue has no such job: an
// id never enqueued, or a job that succeeded without retention (or whose
// retention ran out). A job that is pending is reported as such even if a
// dead or succeeded record of the same id is kept. One script call.
func (b *Broker) Job(ctx context.Context, queue, id string) (*job.JobInfo, error) {
	s, err := b.shardOf(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	k := s.Keys()
	res, err := b.run(ctx, jobScript, []string{k.Scheduled, k.Processing, k.Jobs, k.Attempts, k.Dead, k.DeadIndex, k.Parked, k.Held, k.Progress, k.Done}, id)
	if err != nil {
		return nil, queueErr(queue, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 7 {
		return nil, fmt.Errorf("broker: job: unexpected reply %v", res)
	}
	now, _ := parts[0].(int64)
	state, _ := parts[1].(int64)
	at, _ := parts[2].(int64)
	attempts, _ := parts[3].(int64)
	body, _ := parts[4].(string)
	progress, _ := parts[5].(string)
	ttl, _ := parts[6].(int64)
	switch state {
	case 1:
		return newJobInfo(queue, id, job.StateScheduled, fromMS(now), fromMS(at), attempts, []byte(body)), nil
	case 2:
		j := newJobInfo(queue, id, job.StateProcessing, fromMS(now), fromMS(at), attempts, []byte(body))
		j.Progress = parseProgress(progress)
		return j, nil
	case 4:
		return succeededInfo(queue, id, fromMS(now), body, ttl), nil
	case 3:
		rec := decodeStored(s, id, []byte(body))
		rec.DiedAt = fromMS(at)
		j := newJobInfo(queue, id, job.StateDead, fromMS(now), time.Time{}, int64(rec.Attempts), rec.Body)
		j.Dead = rec
		return j, nil
	}
	return nil, fmt.Errorf("%w: no job %q in queue %q", ErrNotFound, id, queue)
}

// JobPage is one page of scheduled or processing jobs.
type JobPage struct {
	Now  time.Time      // the server's clock at the read
	Jobs []*job.JobInfo // in (time, id) order
	// Next is the cursor of the next page, "" when this is the last: an
	// opaque token of URL-safe characters, which the same page call takes
	// back as its cursor.
	Next string
}

// ErrBadCursor is wrapped by the page calls when a cursor is not one they
// returned. It wraps job.ErrInvalid.
var ErrBadCursor = fmt.Errorf("%w: malformed page cursor: start again from the first page", job.ErrInvalid)

// jobCursor is a position in a queue's scheduled or processing jobs, which
// are ordered by (time, id): the last job returned. Its text is
// base64url("<ms>:<id>").
type jobCursor struct {
	at int64
	id string
}

func (c jobCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.at, 10) + ":" + c.id))
}

func parseJobCursor(s string) (jobCursor, error) {
	if s == "" {
		return jobCursor{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return jobCursor{}, fmt.Errorf("broker: %w", ErrBadCursor)
	}
	at, id, ok := strings.Cut(string(raw), ":")
	v, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || naming.ID(id) != nil {
		return jobCursor{}, fmt.Errorf("broker: %w", ErrBadCursor)
	}
	return jobCursor{at: v, id: id}, nil
}

// MaxPageLimit is the most jobs one page call returns.
const MaxPageLimit = 1000

// ScheduledPage returns up to limit scheduled jobs of queue after the
// cursor ("" for the first page, else a page's Next), earliest ready time
// first, with their envelopes. Jobs that are claimed, rescheduled or
// enqueued meanwhile cause no gaps or repeats among the others. One script
// call per shard, pipelined; a sharded queue's pages are merged. A cursor
// no page returned gives an error wrapping ErrBadCursor.
func (b *Broker) ScheduledPage(ctx context.Context, queue, cursor string, limit int) (JobPage, error) {
	return b.jobPage(ctx, queue, job.StateScheduled, cursor, limit)
}

// ProcessingPage returns up to limit jobs of queue that are leased to
// workers, after the cursor, earliest lease deadline first. See
// ScheduledPage.
func (b *Broker) ProcessingPage(ctx context.Context, queue, cursor string, limit int) (JobPage, error) {
	return b.jobPage(ctx, queue, job.StateProcessing, cursor, limit)
}

func (b *Broker) jobPage(ctx context.Context, queue string, state job.JobState, cursor string, limit int) (JobPage, error) {
	if err := naming.Queue(queue); err != nil {
		return JobPage{}, err
	}
	after, err := parseJobCursor(cursor)
	if err != nil {
		return JobPage{}, err
	}
	if limit <= 0 || limit > MaxPageLimit {
		return JobPage{}, fmt.Errorf("broker: %w: page limit %d is outside 1..%d", job.ErrInvalid, limit, MaxPageLimit)
	}
	q, err := b.queue(ctx, queue)
	if err != nil {
		return JobPage{}, err
	}
	score := ""
	if after.id != "" {
		score = strconv.FormatInt(after.at, 10)
	}
	calls := make([]read, len(q.Shards()))
	for i, s := range q.Shards() {
		k := s.Keys()
		set := k.Scheduled
		if state == job.StateProcessing {
			set = k.Processing
		}
		calls[i] = read{s: pageScript, keys: []string{set, k.Jobs, k.Attempts}, args: []any{score, after.id, limit}}
	}
	res, errs := b.runReads(ctx, calls)
	var page JobPage
	more := false
	for i := range calls {
		if errs[i] != nil {
			return JobPage{}, queueErr(queue, errs[i])
		}
		now, shardMore, jobs, err := parsePage(queue, state, res[i])
		if err != nil {
			return JobPage{}, err
		}
		if i == 0 {
			page.Now = now
		}
		more = more || shardMore
		page.Jobs = append(page.Jobs, jobs...)
	}
	if q.Sharded() {
		slices.SortFunc(page.Jobs, func(x, y *job.JobInfo) int {
			if c := cmp.Compare(at(x), at(y)); c != 0 {
				return c
			}
			return strings.Compare(x.ID, y.ID)
		})
		if len(page.Jobs) > limit {
			page.Jobs, more = page.Jobs[:limit], true
		}
	}
	if more && len(page.Jobs) > 0 {
		last := page.Jobs[len(page.Jobs)-1]
		page.Next = jobCursor{at: at(last), id: last.ID}.String()
	}
	return page, nil
}

// parsePage decodes the reply of page.lua.
func parsePage(queue string, state job.JobState, res any) (now time.Time, more bool, jobs []*job.JobInfo, err error) {
	parts, ok := res.([]any)
	if !ok || len(parts) != 3 {
		return time.Time{}, false, nil, fmt.Errorf("broker: page: unexpected reply %v", res)
	}
	nowMS, _ := parts[0].(int64)
	moreFlag, _ := parts[1].(int64)
	flat, ok := parts[2].([]any)
	if !ok || len(flat)%4 != 0 {
		return time.Time{}, false, nil, fmt.Errorf("broker: page: unexpected job list %v", parts[2])
	}
	now = fromMS(nowMS)
	jobs = make([]*job.JobInfo, 0, len(flat)/4)
	for i := 0; i < len(flat); i += 4 {
		id, _ := flat[i].(string)
		at, _ := flat[i+1].(int64)
		attempts, _ := flat[i+2].(int64)
		body, _ := flat[i+3].(string)
		jobs = append(jobs, newJobInfo(queue, id, state, now, fromMS(at), attempts, []byte(body)))
	}
	return now, moreFlag == 1, jobs, nil
}

func at(j *job.JobInfo) int64 {
	if j.State == job.StateProcessing {
		return ms(j.LeaseDeadline)
	}
	return ms(j.ReadyAt)
}

// ErrConfigUnavailable is wrapped by EvictionPolicy when the server does not
// let this client read its configuration (CONFIG is renamed, disabled or
// not permitted by an ACL, as on many managed services).
var ErrConfigUnavailable = errors.New("broker: server configuration cannot be read")

// EvictionPolicy returns the server's maxmemory-policy. On servers where
// CONFIG GET is refused it returns an error wrapping ErrConfigUnavailable;
// callers treat that as "unknown", not as a failure.
func (b *Broker) EvictionPolicy(ctx context.Context) (string, error) {
	m, err := b.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		var reply redis.Error
		if !errors.As(err, &reply) {
			return "", err // not the server's answer: Redis is unreachable
		}
		return "", fmt.Errorf("%w: %v", ErrConfigUnavailable, err)
	}
	p, ok := m["maxmemory-policy"]
	if !ok {
		return "", fmt.Errorf("%w: CONFIG GET maxmemory-policy returned nothing", ErrConfigUnavailable)
	}
	return p, nil
}

// EvictionSafe reports whether a maxmemory-policy keeps delayq's keys: delayq
// sets no TTLs, so "noeviction" and the volatile-* policies never evict them
// (writes fail with an out-of-memory error instead, and no job is lost),
// while the allkeys-* policies may drop jobs silently.
func EvictionSafe(policy string) bool {
	switch policy {
	case "noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl":
		return true
	}
	return false
}
