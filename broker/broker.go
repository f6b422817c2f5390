package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// Options configure a Broker. The zero value is usable: every field has a
// documented default.
type Options struct {
	// Namespace prefixes every key; letters, digits and '._-:'. Default
	// "delayq".
	Namespace string

	// MaxPayloadBytes caps an envelope's payload and headers (keys and
	// values, counted together). 0 means 1 MiB; negative means no cap.
	MaxPayloadBytes int

	// DeadCap is how many dead records a queue keeps; the oldest are
	// trimmed when a job dies. A sharded queue's shards share it (shard k
	// keeps DeadCap/n, the first DeadCap%n one more), so the queue keeps
	// at most DeadCap. 0 means 10,000; negative means no cap. Every record
	// trimmed is counted (job.QueueStats.DeadTrimmedCap), a worker logs a
	// warning when trims begin (at most one a minute per queue, across the
	// workers), and a worker with Options.OnDeadTrimmed is handed
	// the trimmed records. Size it as deaths per second x seconds until
	// someone looks (docs/operations.md).
	DeadCap int

	// DeadMaxAge drops dead records older than this when a job dies or on
	// Trim. 0 means 30 days; negative means they never expire. The records
	// it drops are counted in job.QueueStats.DeadTrimmedAge.
	DeadMaxAge time.Duration

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

	// ResendWindow is how long the first outcome of a call that changes
	// jobs (an enqueue, a cancel, a reschedule, a redrive, a dead-record
	// delete) is remembered under the call's id, so that the same call
	// sent again (by go-redis after a lost reply, or by Resend after
	// ErrOutcomeUnknown or ErrNotReplicated) gets that outcome instead of
	// running again, even after the job ran and ended. Each remembered
	// call costs about 110 bytes of Redis memory for the window (one
	// expiring key; a batch enqueue remembers each job). 0 means 2
	// minutes; negative remembers nothing: a resend is then a
	// new call.
	ResendWindow time.Duration

	// Functions runs the scripts as the Redis functions of this build's
	// library (FCALL, and FCALL_RO for those that change nothing) instead
	// of EVALSHA, so that the broker's Redis user needs no right to run
	// code of its own: give it the rules `delayq acl --functions` prints.
	// The library must be loaded first, by a user allowed to (`delayq
	// admin load-functions`); a call the server has no function for fails with
	// an error wrapping ErrFunctionsNotLoaded. Needs Redis 7. See
	// docs/security.md.
	Functions bool
}

// Defaults of Options.
const (
	defaultNamespace       = admin.DefaultNamespace
	defaultMaxPayloadBytes = rules.DefaultMaxPayloadBytes // 1 MiB
	defaultDeadCap         = admin.DefaultDeadCap
	defaultDeadMaxAge      = admin.DefaultDeadMaxAge
	// trimWarnEvery is how often at most a queue's workers warn that its
	// dead letters are being trimmed by DeadCap: the first trim warns, and
	// then one a minute while trims go on (the last warning's time is kept
	// in Redis, so the workers of a fleet share it).
	trimWarnEvery = time.Minute
	// defaultResendWindow covers go-redis's own re-sends (seconds), a
	// caller's Resend with backoff for a minute, and a failover (a
	// Sentinel's default down-after is 30 s, a cluster's node timeout
	// 15 s) between the first send and the resend.
	defaultResendWindow = 2 * time.Minute
)

// Broker stores jobs in Redis. It is safe for concurrent use. It implements
// job.Enqueuer.
type Broker struct {
	rdb   redis.UniversalClient
	ns    string
	opts  Options
	route *keyspace.Router // shard counts of queues, see queues.go
	clock func() time.Time // a test's clock (UseClock); nil: the server's TIME

	servers []serverCheck // what New learned of the servers' versions, see version.go

	combiners sync.Map // physical queue name -> *combiner of single-job enqueues

	infoRefused atomic.Pointer[error] // the server refused INFO memory: admin.ServerMemory asks no more

	intercepted atomic.Pointer[protocol.Broker] // a test's wrap of the worker protocol (InterceptProtocol)
}

var _ job.Enqueuer = (*Broker)(nil)

// New returns a Broker over rdb, which may be a *redis.Client, a
// *redis.ClusterClient or a Sentinel failover client. It checks the
// options, then reads the server's version once (INFO server; on a
// cluster, every master's) and refuses a server older than
// Redis 6.2.0 with an error wrapping ErrServerTooOld that names the
// server, its version and the minimum. A server that refuses INFO (renamed,
// disabled, or not allowed to an ACL user such as one given the rules of
// `delayq acl`), and every server when opts.Functions is set (its users are given no INFO),
// is checked instead by sending ZMSCORE without a member: the server's
// "wrong number of arguments" tells it knows the command, and needs no
// right. When neither answers, or the server cannot be reached within 5
// seconds, New does not refuse: it returns the broker (a server too old
// then fails at the first script that needs what it lacks). Bad options get an error before anything is
// sent.
func New(rdb redis.UniversalClient, opts Options) (*Broker, error) {
	if rdb == nil {
		return nil, errors.New("broker: nil redis client")
	}
	prepareScripts()
	if opts.Namespace == "" {
		opts.Namespace = defaultNamespace
	}
	if err := validateNamespace(opts.Namespace); err != nil {
		return nil, err
	}
	if opts.MaxPayloadBytes == 0 {
		opts.MaxPayloadBytes = defaultMaxPayloadBytes
	}
	if opts.DeadCap == 0 {
		opts.DeadCap = defaultDeadCap
	}
	if opts.DeadMaxAge == 0 {
		opts.DeadMaxAge = defaultDeadMaxAge
	}
	if opts.WaitReplicas < 0 || opts.WaitTimeout < 0 {
		return nil, fmt.Errorf("broker: %w: WaitReplicas %d and WaitTimeout %s must not be negative", job.ErrInvalid, opts.WaitReplicas, opts.WaitTimeout)
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = defaultWaitTimeout
	}
	if opts.ResendWindow == 0 {
		opts.ResendWindow = defaultResendWindow
	}
	b := &Broker{rdb: rdb, ns: opts.Namespace, opts: opts}
	b.route = keyspace.NewRouter(b.ns, shardCounts{b})
	if err := b.checkServers(); err != nil {
		return nil, err
	}
	return b, nil
}

func validateNamespace(ns string) error {
	if msg := keyspace.CheckNamespace(ns); msg != "" {
		return fmt.Errorf("broker: %w: %s", job.ErrInvalid, msg)
	}
	return nil
}

// Namespace returns the key prefix.
func (b *Broker) Namespace() string { return b.ns }

// Client returns the Redis client the broker uses.
func (b *Broker) Client() redis.UniversalClient { return b.rdb }

// queueNames returns the names of every queue that was ever enqueued to
// (admin.Broker.Queues).
func (b *Broker) queueNames(ctx context.Context) ([]string, error) {
	return b.rdb.SMembers(ctx, keyspace.QueuesKey(b.ns)).Result()
}

// queue resolves a user's queue for reading or changing the jobs it holds.
func (b *Broker) queue(ctx context.Context, name string) (keyspace.Queue, error) {
	if err := naming.Queue(name); err != nil {
		return keyspace.Queue{}, err
	}
	q, err := b.route.Queue(ctx, name)
	if err != nil {
		return keyspace.Queue{}, queueErr(name, err)
	}
	return q, nil
}

// shardOf resolves the shard that holds job id of queue.
func (b *Broker) shardOf(ctx context.Context, queue, id string) (keyspace.Shard, error) {
	if err := naming.Queue(queue); err != nil {
		return keyspace.Shard{}, err
	}
	if err := naming.ID(id); err != nil {
		return keyspace.Shard{}, err
	}
	q, err := b.queue(ctx, queue)
	if err != nil {
		return keyspace.Shard{}, err
	}
	return q.Route(id), nil
}

func ms(t time.Time) int64        { return t.UnixMilli() }
func fromMS(v int64) time.Time    { return time.UnixMilli(v) }
func durMS(d time.Duration) int64 { return d.Milliseconds() }

// durUS is d in whole µs, rounded up: the scripts round a ready time up to
// the next ms, so that no job is due before its delay has passed.
func durUS(d time.Duration) int64 {
	return int64((max(d, 0) + time.Microsecond - 1) / time.Microsecond)
}

// fromUS is a time in µs since the epoch, as the scripts return "now".
func fromUS(v int64) time.Time           { return time.UnixMicro(v) }
func queueErr(q string, err error) error { return fmt.Errorf("queue %q: %w", q, err) }

// readyMS is an absolute ready time in whole ms, rounded up so that a job
// never becomes due before the instant it was given (scores are ms, and a
// job is due once the server's ms clock reaches its score). It is at least
// 1, as 0 means "use the delay" in the scripts.
func readyMS(t time.Time) int64 { return rules.ReadyMS(t) }

func flag(v bool) string {
	if v {
		return "1"
	}
	return "0"
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

// batchErr returns nil when every entry of errs is nil, the error itself
// for a batch of one, and a *job.BatchError otherwise.
func batchErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			if len(errs) == 1 {
				return err
			}
			return &job.BatchError{Errs: errs}
		}
	}
	return nil
}
