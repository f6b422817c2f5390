package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/job"
)

// Options configure a Broker. The zero value is usable: every field has a
// documented default.
type Options struct {
	// Namespace prefixes every key; letters, digits and '._-:'. Default
	// "delayq".
	Namespace string

	// MaxPayloadBytes caps an envelope's payload. 0 means 1 MiB; negative
	// means no cap.
	MaxPayloadBytes int

	// DeadCap is how many dead records a queue keeps; the oldest are
	// trimmed when a job dies. 0 means 10,000; negative means no cap.
	DeadCap int

	// DeadMaxAge drops dead records older than this when a job dies or on
	// Trim. 0 means 30 days; negative means they never expire.
	DeadMaxAge time.Duration

	// Clock, when set, replaces the Redis server's TIME in every script.
	// Only tests with a simulated clock set it; production leaves it nil so
	// that all workers share the server's clock.
	Clock func() time.Time

	// WaitReplicas, when positive, makes every change to jobs wait until
	// that many replicas confirm it (Redis WAIT, on the connection that made
	// it), so that a failover loses no job whose Enqueue returned nil; a
	// change that is not confirmed within WaitTimeout fails with an error
	// wrapping ErrNotReplicated. 0 does not wait: replication is
	// asynchronous and a failover can lose the last writes (see
	// docs/scaling.md). With no replica, every change fails.
	WaitReplicas int

	// WaitTimeout bounds the wait for replicas. 0 means 1s. Keep it below
	// the client's ReadTimeout (3s by default).
	WaitTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultNamespace       = "delayq"
	DefaultMaxPayloadBytes = 1 << 20
	DefaultDeadCap         = 10_000
	DefaultDeadMaxAge      = 30 * 24 * time.Hour
)

// Broker stores jobs in Redis. It is safe for concurrent use. It implements
// job.Enqueuer.
type Broker struct {
	rdb        redis.UniversalClient
	ns         string
	opts       Options
	shardCache shardCache // shard counts of queues, see shard.go

	combiners sync.Map // physical queue name -> *combiner of single-job enqueues
}

var _ job.Enqueuer = (*Broker)(nil)

// New returns a Broker over rdb, which may be a *redis.Client, a
// *redis.ClusterClient or a Sentinel failover client. It checks the options
// but does not contact Redis.
func New(rdb redis.UniversalClient, opts Options) (*Broker, error) {
	if rdb == nil {
		return nil, errors.New("broker: nil redis client")
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if err := validateNamespace(opts.Namespace); err != nil {
		return nil, err
	}
	if opts.MaxPayloadBytes == 0 {
		opts.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if opts.DeadCap == 0 {
		opts.DeadCap = DefaultDeadCap
	}
	if opts.DeadMaxAge == 0 {
		opts.DeadMaxAge = DefaultDeadMaxAge
	}
	if opts.WaitReplicas < 0 || opts.WaitTimeout < 0 {
		return nil, fmt.Errorf("broker: %w: WaitReplicas %d and WaitTimeout %s must not be negative", job.ErrInvalid, opts.WaitReplicas, opts.WaitTimeout)
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	return &Broker{rdb: rdb, ns: opts.Namespace, opts: opts}, nil
}

func validateNamespace(ns string) error {
	if len(ns) > 64 {
		return fmt.Errorf("broker: %w: namespace is %d bytes long, the limit is 64", job.ErrInvalid, len(ns))
	}
	for _, r := range ns {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == ':':
		default:
			return fmt.Errorf("broker: %w: namespace %q contains %q; allowed are letters, digits and '._-:'", job.ErrInvalid, ns, r)
		}
	}
	return nil
}

// Namespace returns the key prefix.
func (b *Broker) Namespace() string { return b.ns }

// Client returns the Redis client the broker uses.
func (b *Broker) Client() redis.UniversalClient { return b.rdb }

// nowArg is ARGV[1] of every script: "" for the server's clock.
func (b *Broker) nowArg() string {
	if b.opts.Clock == nil {
		return ""
	}
	return strconv.FormatInt(b.opts.Clock().UnixMilli(), 10)
}

func (b *Broker) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	return b.exec(ctx, s, keys, append([]any{b.nowArg()}, args...))
}

// Queues returns the names of every queue that was ever enqueued to.
func (b *Broker) Queues(ctx context.Context) ([]string, error) {
	return b.rdb.SMembers(ctx, queuesKey(b.ns)).Result()
}

func ms(t time.Time) int64               { return t.UnixMilli() }
func fromMS(v int64) time.Time           { return time.UnixMilli(v) }
func durMS(d time.Duration) int64        { return d.Milliseconds() }
func tokenArg(token int64) string        { return strconv.FormatInt(token, 10) }
func queueErr(q string, err error) error { return fmt.Errorf("queue %q: %w", q, err) }

// readyMS is an absolute ready time in whole ms, rounded up so that a job
// never becomes due before the instant it was given (scores are ms, and a
// job is due once the server's ms clock reaches its score). It is at least
// 1, as 0 means "use the delay" in the scripts.
func readyMS(t time.Time) int64 {
	v := t.UnixMilli()
	if t.After(time.UnixMilli(v)) {
		v++
	}
	return max(v, 1)
}

// Enqueue validates and stores envelopes: one script call per queue. A batch
// with an invalid envelope is refused whole, with an error wrapping
// job.ErrInvalid that names it, and nothing is written. Ids that are still
// pending fail with ErrDuplicate (in a *job.BatchError for a batch) and leave
// the stored job unchanged. On success each envelope gets its ID (generated
// when empty), Queue, CreatedAt and ReadyAt (server time). Single-job calls
// that overlap in time share script calls (see combine.go).
func (b *Broker) Enqueue(ctx context.Context, envs ...*job.Envelope) error {
	if len(envs) == 1 {
		body, err := b.prepare(envs[0], time.Now())
		if err != nil {
			return err
		}
		order, _, err := b.placeAll(ctx, envs) // its shard, see shard.go
		if err != nil {
			return err
		}
		return b.enqueueCombined(ctx, order[0], envs[0], body)
	}
	bodies := make([][]byte, len(envs))
	now := time.Now()
	for i, env := range envs {
		body, err := b.prepare(env, now)
		if err != nil {
			return fmt.Errorf("job %d of %d: %w", i+1, len(envs), err)
		}
		bodies[i] = body
	}
	order, groups, err := b.placeAll(ctx, envs) // physical queues, see shard.go
	if err != nil {
		return err
	}
	errs := make([]error, len(envs))
	failed := false
	for _, q := range order {
		idx := groups[q]
		if err := b.enqueueQueue(ctx, q, envs, bodies, idx, errs); err != nil {
			for _, i := range idx {
				errs[i] = err
			}
		}
		for _, i := range idx {
			failed = failed || errs[i] != nil
		}
	}
	switch {
	case !failed:
		return nil
	case len(envs) == 1:
		return errs[0]
	default:
		return &job.BatchError{Errs: errs}
	}
}

// enqueueChunk bounds the work of one script call so that Redis stays
// responsive to other clients during large batches.
const enqueueChunk = 1000

func (b *Broker) enqueueQueue(ctx context.Context, q string, envs []*job.Envelope, bodies [][]byte, idx []int, errs []error) error {
	k := b.keys(q)
	for start := 0; start < len(idx); start += enqueueChunk {
		part := idx[start:min(start+enqueueChunk, len(idx))]
		args := make([]any, 0, 1+4*len(part))
		args = append(args, k.wake)
		for _, i := range part {
			var at int64
			if !envs[i].At.IsZero() {
				at = readyMS(envs[i].At)
			}
			args = append(args, envs[i].ID, bodies[i], at, durMS(envs[i].Delay))
		}
		res, err := b.run(ctx, enqueueScript, []string{k.scheduled, k.jobs}, args...)
		if err != nil {
			return err
		}
		ready, err := int64s(res, len(part))
		if err != nil {
			return err
		}
		for j, i := range part {
			if ready[j] < 0 {
				errs[i] = fmt.Errorf("%w: id %q in queue %q", ErrDuplicate, envs[i].ID, envs[i].Queue)
				continue
			}
			envs[i].ReadyAt = fromMS(ready[j])
		}
	}
	return nil
}

// prepare fills in defaults, validates env and encodes its body.
func (b *Broker) prepare(env *job.Envelope, now time.Time) ([]byte, error) {
	if env == nil {
		return nil, fmt.Errorf("broker: %w: nil envelope", job.ErrInvalid)
	}
	if env.Queue == "" {
		env.Queue = job.DefaultQueue
	}
	if err := job.ValidateQueue(env.Queue); err != nil {
		return nil, err
	}
	if env.ID == "" {
		env.ID = job.NewID()
	}
	if err := job.ValidateID(env.ID); err != nil {
		return nil, err
	}
	if err := job.ValidateType(env.Type); err != nil {
		return nil, err
	}
	if err := job.ValidateDelay(env.Delay); err != nil {
		return nil, err
	}
	if env.MaxRetries < 0 {
		return nil, fmt.Errorf("broker: %w: max retries %d is negative", job.ErrInvalid, env.MaxRetries)
	}
	if env.Timeout < 0 {
		return nil, fmt.Errorf("broker: %w: timeout %s is negative", job.ErrInvalid, env.Timeout)
	}
	if env.Backoff != nil {
		if err := env.Backoff.Validate(); err != nil {
			return nil, err
		}
	}
	for k, v := range env.Headers {
		if err := job.ValidateHeader(k, v); err != nil {
			return nil, err
		}
	}
	if c := b.opts.MaxPayloadBytes; c > 0 && len(env.Payload) > c {
		return nil, fmt.Errorf("broker: %w: %w: payload of job %q is %d bytes, the cap is %d", job.ErrInvalid, ErrPayloadTooLarge, env.ID, len(env.Payload), c)
	}
	if env.CreatedAt.IsZero() {
		env.CreatedAt = now
	}
	return env.MarshalBinary()
}

// Lease identifies a claimed job and the fencing token of the claim.
type Lease struct {
	Queue string
	ID    string
	Token int64
}

// Claimed is a job handed to a worker by Claim or found expired by Reap.
type Claimed struct {
	Lease
	Attempt  int           // attempts spent, including this one
	ReadyAt  time.Time     // when it became due (Claim) or its lease deadline (Reap)
	Body     []byte        // the envelope as stored
	Envelope *job.Envelope // decoded Body; nil when Err is set
	Err      error         // wraps job.ErrCorrupt: Body did not decode, or the attempts counter was garbage
}

// Message returns the delivery a handler sees. It panics if Err is set.
func (c *Claimed) Message() *job.Message {
	return &job.Message{Envelope: *c.Envelope, Attempt: c.Attempt}
}

// ClaimResult is the outcome of one Claim call.
type ClaimResult struct {
	Now     time.Time // the server's clock at the claim
	Next    time.Time // earliest ready time left in the queue; zero when empty
	Jobs    []Claimed
	Orphans []string // scheduled ids without an envelope, removed
}

// Claim leases up to n due jobs of queue for lease each, in ready-time order.
// A sharded queue's shards are asked in turn; order then holds per shard.
func (b *Broker) Claim(ctx context.Context, queue string, n int, lease time.Duration) (ClaimResult, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return ClaimResult{}, err
	}
	if lease <= 0 {
		return ClaimResult{}, fmt.Errorf("broker: %w: lease %s must be positive", job.ErrInvalid, lease)
	}
	return b.claimShards(ctx, queue, n, lease)
}

// claim is Claim on one physical queue.
func (b *Broker) claim(ctx context.Context, queue string, n int, lease time.Duration) (ClaimResult, error) {
	k := b.keys(queue)
	res, err := b.run(ctx, claimScript, []string{k.scheduled, k.processing, k.jobs, k.attempts, k.leases, k.seq, k.hist}, n, durMS(lease))
	if err != nil {
		return ClaimResult{}, queueErr(queue, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 4 {
		return ClaimResult{}, fmt.Errorf("broker: claim: unexpected reply %v", res)
	}
	now, _ := parts[0].(int64)
	next, _ := parts[1].(int64)
	out := ClaimResult{Now: fromMS(now)}
	if next >= 0 {
		out.Next = fromMS(next)
	}
	if out.Jobs, err = decodeClaimed(queue, parts[2]); err != nil {
		return ClaimResult{}, err
	}
	out.Orphans, err = strs(parts[3])
	return out, err
}

// decodeClaimed parses the flat id, token, attempt, time, body list that
// claim and reap return.
func decodeClaimed(queue string, v any) ([]Claimed, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%5 != 0 {
		return nil, fmt.Errorf("broker: unexpected job list %v", v)
	}
	out := make([]Claimed, 0, len(flat)/5)
	for i := 0; i < len(flat); i += 5 {
		id, _ := flat[i].(string)
		token, _ := flat[i+1].(int64)
		attempt, _ := flat[i+2].(int64)
		at, _ := flat[i+3].(int64)
		body, _ := flat[i+4].(string)
		c := Claimed{
			Lease:   Lease{Queue: queue, ID: id, Token: token},
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

// Ack finishes jobs whose handlers succeeded: one script call per queue.
// It returns nil, or a *job.BatchError aligned with leases whose entries wrap
// ErrLeaseLost (nothing changed for that job) or a Redis error.
func (b *Broker) Ack(ctx context.Context, leases ...Lease) error {
	return b.perLease(ctx, leases, func(k keys) []string {
		return []string{k.processing, k.jobs, k.attempts, k.leases, k.hist}
	}, ackScript, nil)
}

// Extend pushes the deadline of held leases to now + lease: one script call
// per queue. Errors as for Ack.
func (b *Broker) Extend(ctx context.Context, lease time.Duration, leases ...Lease) error {
	if lease <= 0 {
		return fmt.Errorf("broker: %w: lease %s must be positive", job.ErrInvalid, lease)
	}
	return b.perLease(ctx, leases, func(k keys) []string {
		return []string{k.processing, k.leases}
	}, extendScript, func(keys) []any { return []any{durMS(lease)} })
}

// Release hands held jobs back to be claimed again at once, without spending
// an attempt: what a worker does at shutdown with jobs it could not finish.
// Errors as for Ack.
func (b *Broker) Release(ctx context.Context, leases ...Lease) error {
	return b.perLease(ctx, leases, func(k keys) []string {
		return []string{k.scheduled, k.processing, k.attempts, k.leases}
	}, releaseScript, func(k keys) []any { return []any{k.wake} })
}

// perLease runs a batch script over leases grouped by queue. The script takes
// the fixed args then id, token pairs and returns 1 or 0 per pair.
func (b *Broker) perLease(ctx context.Context, leases []Lease, keysOf func(keys) []string, s *redis.Script, fixed func(keys) []any) error {
	groups, err := b.leaseGroups(ctx, leases)
	if err != nil {
		return err
	}
	errs := make([]error, len(leases))
	failed := false
	for q, idx := range groups {
		k := b.keys(q)
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
				errs[i] = queueErr(q, err)
			case oks[j] != 1:
				errs[i] = fmt.Errorf("%w: job %q in queue %q (token %d)", ErrLeaseLost, leases[i].ID, q, leases[i].Token)
			}
			failed = failed || errs[i] != nil
		}
	}
	if !failed {
		return nil
	}
	return &job.BatchError{Errs: errs}
}

// Retry puts a failed job back in the schedule, ready after delay, storing
// env (which carries the last error) as its new envelope. It returns the new
// ready time, or an error wrapping ErrLeaseLost if the caller no longer holds
// the lease (nothing changed).
func (b *Broker) Retry(ctx context.Context, l Lease, delay time.Duration, env *job.Envelope) (time.Time, error) {
	return b.retry(ctx, l, delay, env, false)
}

// RetryExpired is Retry for the reaper: it also requires that the lease has
// run out, and returns an error wrapping ErrLeaseLive if it was extended
// since it was read.
func (b *Broker) RetryExpired(ctx context.Context, l Lease, delay time.Duration, env *job.Envelope) (time.Time, error) {
	return b.retry(ctx, l, delay, env, true)
}

func (b *Broker) retry(ctx context.Context, l Lease, delay time.Duration, env *job.Envelope, reaping bool) (time.Time, error) {
	body, err := env.MarshalBinary()
	if err != nil {
		return time.Time{}, err
	}
	q, err := b.locate(ctx, l.Queue, l.ID)
	if err != nil {
		return time.Time{}, queueErr(l.Queue, err)
	}
	k := b.keys(q)
	res, err := b.run(ctx, retryScript, []string{k.scheduled, k.processing, k.jobs, k.leases, k.hist},
		l.ID, tokenArg(l.Token), durMS(max(delay, 0)), body, flag(reaping), k.wake)
	if err != nil {
		return time.Time{}, queueErr(l.Queue, err)
	}
	ready, _ := res.(int64)
	if err := leaseResult(l, ready); err != nil {
		return time.Time{}, err
	}
	return fromMS(ready), nil
}

func leaseResult(l Lease, code int64) error {
	switch code {
	case -1:
		return fmt.Errorf("%w: job %q in queue %q (token %d)", ErrLeaseLost, l.ID, l.Queue, l.Token)
	case -2:
		return fmt.Errorf("%w: job %q in queue %q", ErrLeaseLive, l.ID, l.Queue)
	}
	return nil
}

func flag(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// Kill moves a held job to the dead-letter store with rec, then trims the
// store to its cap and max age. It returns the died-at time, or an error
// wrapping ErrLeaseLost (nothing changed).
func (b *Broker) Kill(ctx context.Context, l Lease, rec *DeadRecord) (time.Time, error) {
	return b.kill(ctx, l, rec, false)
}

// KillExpired is Kill for the reaper; see RetryExpired.
func (b *Broker) KillExpired(ctx context.Context, l Lease, rec *DeadRecord) (time.Time, error) {
	return b.kill(ctx, l, rec, true)
}

func (b *Broker) kill(ctx context.Context, l Lease, rec *DeadRecord, reaping bool) (time.Time, error) {
	rec.ID, rec.Queue = l.ID, l.Queue
	data, err := rec.marshal()
	if err != nil {
		return time.Time{}, err
	}
	q, err := b.locate(ctx, l.Queue, l.ID)
	if err != nil {
		return time.Time{}, queueErr(l.Queue, err)
	}
	k := b.keys(q)
	res, err := b.run(ctx, killScript, []string{k.processing, k.jobs, k.attempts, k.leases, k.dead, k.deadIndex, k.hist},
		l.ID, tokenArg(l.Token), data, flag(reaping), b.opts.DeadCap, durMS(b.opts.DeadMaxAge))
	if err != nil {
		return time.Time{}, queueErr(l.Queue, err)
	}
	died, _ := res.(int64)
	if err := leaseResult(l, died); err != nil {
		return time.Time{}, err
	}
	rec.DiedAt = fromMS(died)
	return rec.DiedAt, nil
}

// ReapResult lists jobs whose lease ran out.
type ReapResult struct {
	Now     time.Time
	Jobs    []Claimed // ReadyAt holds the lease deadline that passed
	Orphans []string  // processing ids without envelope or lease, removed
}

// Reap lists up to limit jobs of queue whose lease has run out. It changes
// nothing about them: the caller decides, by each envelope's retry budget,
// to call RetryExpired or KillExpired with the token read here, so a worker
// that comes back late is fenced.
func (b *Broker) Reap(ctx context.Context, queue string, limit int) (ReapResult, error) {
	return b.reapShards(ctx, queue, limit)
}

// reap is Reap on one physical queue.
func (b *Broker) reap(ctx context.Context, queue string, limit int) (ReapResult, error) {
	k := b.keys(queue)
	res, err := b.run(ctx, reapScript, []string{k.processing, k.jobs, k.attempts, k.leases}, limit)
	if err != nil {
		return ReapResult{}, queueErr(queue, err)
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 3 {
		return ReapResult{}, fmt.Errorf("broker: reap: unexpected reply %v", res)
	}
	now, _ := parts[0].(int64)
	out := ReapResult{Now: fromMS(now)}
	if out.Jobs, err = decodeClaimed(queue, parts[1]); err != nil {
		return ReapResult{}, err
	}
	out.Orphans, err = strs(parts[2])
	return out, err
}

// Cancel removes a job that is still scheduled, so it never runs. It returns
// an error wrapping ErrInProgress when a worker holds the job (nothing
// changed) and ErrNotFound when the queue has no such pending job.
func (b *Broker) Cancel(ctx context.Context, queue, id string) error {
	if err := validQueueID(queue, id); err != nil {
		return err
	}
	q, err := b.locate(ctx, queue, id)
	if err != nil {
		return queueErr(queue, err)
	}
	k := b.keys(q)
	res, err := b.run(ctx, cancelScript, []string{k.scheduled, k.processing, k.jobs, k.attempts}, id)
	if err != nil {
		return queueErr(queue, err)
	}
	return stateResult(queue, id, res)
}

// Reschedule moves a scheduled job to ready at at (the zero time means now).
// Errors as for Cancel.
func (b *Broker) Reschedule(ctx context.Context, queue, id string, at time.Time) (time.Time, error) {
	if err := validQueueID(queue, id); err != nil {
		return time.Time{}, err
	}
	var atMS int64
	if !at.IsZero() {
		atMS = readyMS(at)
	}
	q, err := b.locate(ctx, queue, id)
	if err != nil {
		return time.Time{}, queueErr(queue, err)
	}
	k := b.keys(q)
	res, err := b.run(ctx, rescheduleScript, []string{k.scheduled, k.processing}, id, atMS, 0, k.wake)
	if err != nil {
		return time.Time{}, queueErr(queue, err)
	}
	if err := stateResult(queue, id, res); err != nil {
		return time.Time{}, err
	}
	ready, _ := res.(int64)
	return fromMS(ready), nil
}

func stateResult(queue, id string, res any) error {
	switch code, _ := res.(int64); {
	case code > 0:
		return nil
	case code == -1:
		return fmt.Errorf("%w: job %q in queue %q", ErrInProgress, id, queue)
	default:
		return fmt.Errorf("%w: job %q in queue %q", ErrNotFound, id, queue)
	}
}

func validQueueID(queue, id string) error {
	if err := job.ValidateQueue(queue); err != nil {
		return err
	}
	return job.ValidateID(id)
}

// QueueStats is the state of one queue at one instant of the server's clock.
type QueueStats struct {
	Queue      string
	Now        time.Time
	Scheduled  int64     // jobs waiting, due or not
	Due        int64     // of those, ready now
	Processing int64     // jobs leased to workers
	Dead       int64     // dead records
	OldestDue  time.Time // ready time of the longest-waiting due job; zero when none
	NextReady  time.Time // earliest ready time in the future; zero when none
}

// Lateness is how long the oldest due job has waited, or 0.
func (s QueueStats) Lateness() time.Duration {
	if s.OldestDue.IsZero() {
		return 0
	}
	return s.Now.Sub(s.OldestDue)
}

// Stats reads the counts of one queue in one script call (one per shard of
// a sharded queue, summed).
func (b *Broker) Stats(ctx context.Context, queue string) (QueueStats, error) {
	if err := job.ValidateQueue(queue); err != nil {
		return QueueStats{}, err
	}
	return b.statsShards(ctx, queue)
}

// stats is Stats of one physical queue.
func (b *Broker) stats(ctx context.Context, queue string) (QueueStats, error) {
	k := b.keys(queue)
	res, err := b.run(ctx, statsScript, []string{k.scheduled, k.processing, k.deadIndex})
	if err != nil {
		return QueueStats{}, queueErr(queue, err)
	}
	v, err := int64s(res, 7)
	if err != nil {
		return QueueStats{}, err
	}
	s := QueueStats{Queue: queue, Now: fromMS(v[0]), Scheduled: v[1], Due: v[2], Processing: v[3], Dead: v[4]}
	if v[5] >= 0 {
		s.OldestDue = fromMS(v[5])
	}
	if v[6] >= 0 {
		s.NextReady = fromMS(v[6])
	}
	return s, nil
}

// Wakeups subscribes to the wake-up notices of queues: a queue's name is sent
// on the returned channel when a job becomes its earliest one while nothing
// else there is due. Notices are hints (a slow reader misses some); callers
// still sleep no longer than until the next ready time they know of. stop
// unsubscribes and closes the channel.
func (b *Broker) Wakeups(ctx context.Context, queues []string) (notices <-chan string, stop func()) {
	byChannel := make(map[string]string, len(queues))
	channels := make([]string, 0, len(queues))
	for _, q := range queues {
		c := b.keys(q).wake
		byChannel[c] = q
		channels = append(channels, c)
	}
	ps := b.rdb.Subscribe(ctx, channels...)
	// Wait (briefly) until the server confirms the subscriptions, so that a
	// job enqueued right after this returns is not missed. If Redis is
	// unreachable now, go on: go-redis subscribes again when it reconnects.
	var early []string // notices that arrived among the confirmations
	confirm, cancel := context.WithTimeout(ctx, 2*time.Second)
	for confirmed := 0; confirmed < len(channels); {
		msg, err := ps.ReceiveTimeout(confirm, 2*time.Second)
		if err != nil {
			break
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			confirmed++
		case *redis.Message:
			early = append(early, byChannel[m.Channel])
		}
	}
	cancel()
	out := make(chan string, len(queues)+len(early))
	for _, q := range early {
		out <- q
	}
	done := make(chan struct{})
	go func() {
		defer close(out)
		in := ps.Channel()
		for {
			select {
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- byChannel[m.Channel]:
				default: // a notice is already pending; one is enough
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(done)
			_ = ps.Close()
		})
	}
}

func int64s(v any, n int) ([]int64, error) {
	list, ok := v.([]any)
	if !ok || len(list) != n {
		return nil, fmt.Errorf("broker: unexpected reply %v, want %d integers", v, n)
	}
	out := make([]int64, n)
	for i, x := range list {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("broker: unexpected reply %v, want integers", v)
		}
	}
	return out, nil
}

func strs(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("broker: unexpected reply %v, want strings", v)
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out, nil
}
