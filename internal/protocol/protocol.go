// Package protocol is the worker's side of the broker: claiming due jobs
// under a lease, extending, acknowledging, retrying, dead-lettering and
// releasing them, and reaping the leases of workers that died.
//
// It is internal because only package worker (and delayq's own tests)
// speak it: users see the producer and operator methods of
// *broker.Broker, and this protocol can change without breaking them.
// Package broker implements it; [For] returns a broker's implementation,
// which a *broker.Broker hands out through one method, Seams, whose
// argument (a [Key]) no other module can name: no registry, no init. The
// same method hands out the broker's dead-letter store ([Dead]) and its
// operator's side ([Admin], an internal/admin.Broker): it is the broker's
// one hatch.
//
// Every operation works on one physical queue (a keyspace.Shard): the
// worker resolves a queue's shards with [Broker.Shards], claims and reaps
// shard by shard, and every lease names its shard, so acks, retries and
// kills go straight to it.
package protocol

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// ErrRefused is wrapped by the error of a call that Redis answered with an
// error of the script itself: a key of the wrong type (the scripts check
// every key before their first write, and say "nothing was changed") or
// another failure of the script's own run. The reply was not lost, so the
// call is not one to send again first: sent again, it fails the same way
// until someone repairs what the error names. A worker backs off from that
// shard alone.
var ErrRefused = errors.New("refused by the script")

// ErrLeaseLive: the reaper found that a lease it read as expired was
// extended since; the job stays with its worker. Only the reaper sees it.
var ErrLeaseLive = errors.New("broker: lease is live")

// Lease identifies a claimed job and the fencing token of the claim.
type Lease struct {
	Shard keyspace.Shard
	ID    string
	Token int64
}

// Queue returns the name of the user's queue the job belongs to.
func (l Lease) Queue() string { return l.Shard.Queue() }

// Claimed is a job handed to a worker by Claim or found expired by Reap.
type Claimed struct {
	Lease
	Attempt  int           // attempts spent, including this one
	ReadyAt  time.Time     // when it became due (Claim) or its lease deadline (Reap)
	Body     []byte        // the envelope as stored
	Envelope *job.Envelope // decoded Body; nil when it did not decode (Err is then set)
	// Err wraps job.ErrCorrupt: Body did not decode, the attempts counter
	// was garbage, or the claim could not read the job's type while a type
	// control was set. A job with Err is dead-lettered, never run; its
	// Envelope, when not nil, still gives the dead record its type and
	// tells its batch.
	Err error
	// Cancelled (Reap): the job was asked to stop (broker.Broker.Cancel)
	// under this lease: it ends as cancelled, not retried.
	Cancelled bool
}

// Message returns the delivery a handler sees. It panics if Err is set.
func (c *Claimed) Message() *job.Message {
	return &job.Message{Envelope: *c.Envelope, Attempt: c.Attempt}
}

// ClaimResult is the outcome of one Claim call.
type ClaimResult struct {
	Now     time.Time // the server's clock at the claim
	Next    time.Time // earliest ready time left in the shard; zero when empty
	Jobs    []Claimed
	Orphans []string // scheduled ids without an envelope, removed
	Paused  bool     // the queue is paused (Broker.Pause): nothing was claimed, Next is zero
	// Controlled: the shard has a concurrency cap or a rate limit, so the
	// claim left Caller.Ahead out (nothing prefetched).
	Controlled bool
}

// ReapResult lists jobs whose lease ran out.
type ReapResult struct {
	Now     time.Time
	Jobs    []Claimed // ReadyAt holds the lease deadline that passed
	Orphans []string  // processing ids without envelope or lease, removed
	// UniqueTidied counts the uniqueness entries whose window was over
	// that the call removed (500 at most: the broker's uniqueTidyLimit).
	UniqueTidied int
}

// Death is what a worker knows of a job it dead-letters; the broker makes
// the dead record of it.
type Death struct {
	Type     string // job type, "" when the envelope did not decode
	Body     []byte // the envelope as stored
	Error    string // the final error
	Attempts int    // attempts spent
	Reason   string // broker.ReasonCancelled for a cancelled job; "" otherwise
}

// Caller identifies one worker to the broker: its calls that change jobs
// carry it with a call id, so that a call sent twice (its reply was lost,
// and the worker or its Redis client sent it again) is applied once and
// answered the same both times. The broker keeps, per shard, the last call
// of each lane of a worker (a small hash that expires twice Lease after its
// last write); a worker sends a call again only within Lease of sending it
// first.
type Caller struct {
	ID    string        // the worker's id, unique per process: job.NewID()
	Lease time.Duration // the worker's lease: the broker keeps its last calls twice as long
	// Ahead, in a Claim, is how many of its n jobs may wait in the worker
	// for a free goroutine (prefetch). A shard with a concurrency cap or a
	// rate limit leases at most n - Ahead (and says so in
	// ClaimResult.Controlled), so that its leases are running jobs. 0 for
	// other calls.
	Ahead int
	// KeepTrimmed, in a Claim or Settle, is how many dead records trimmed
	// by the cap or by age each shard keeps for the worker's hook
	// (TakeTrimmed) at most; those beyond it are counted as unarchived. 0
	// keeps none: they are only counted.
	KeepTrimmed int
}

// Lane is a sequence of calls of one worker to one shard: a lane has one
// call in flight at a time, and only the lane's last call can be replayed.
type Lane string

// The lanes of a worker.
const (
	LaneSettle Lane = "settle" // outcomes of the jobs the worker ran
	LaneReap   Lane = "reap"   // outcomes of expired leases the worker reaped
)

// OpKind is what Settle records for a job.
type OpKind byte

// Kinds of Op.
const (
	OpAck     OpKind = 'a' // the handler succeeded: the job is deleted
	OpRetry   OpKind = 'r' // back to the schedule after Delay, as Env
	OpKill    OpKind = 'k' // to the dead-letter store, as Death
	OpRelease OpKind = 'l' // back to the schedule now, the attempt given back
	OpSnooze  OpKind = 's' // back to the schedule after Delay, as Env, the attempt given back
)

// Op is one outcome for Settle to record.
type Op struct {
	Kind    OpKind
	Lease   Lease
	Delay   time.Duration // OpRetry, OpSnooze
	Env     *job.Envelope // OpRetry, OpSnooze: the new envelope (with the last error, the snooze count)
	Death   Death         // OpKill
	Expired bool          // the reaper's: the lease must also have run out
	// Remember (OpAck, OpKill): the id is remembered this long after the
	// job ended, so that a job.Unique enqueue with it is refused; 0 for
	// none (see job.Envelope.UniqueFor).
	Remember time.Duration
	// Batch (OpAck, OpKill): the batch the job is a member of
	// (job.Envelope.Batch), "" for none; its ending is recorded for the
	// batch with the ack or kill.
	Batch string
	// Retain (OpAck): keep the succeeded job this long with Done
	// (job.Envelope.Retain, else its type's); 0 deletes it at the ack.
	Retain time.Duration
	// Done (OpAck with Retain): what is kept of the succeeded job.
	Done *Done
	// Next (OpAck): the next jobs of the succeeded job (job.Then,
	// job.Next) that live in its shard, as Chain returned them: stored in
	// the call that acks it, unless their ids are pending there already.
	Next []*job.Envelope
}

// Done is what a retained succeeded job keeps (broker.Broker.Job reads it
// back); the server adds when it was acked.
type Done struct {
	Body      []byte    // the envelope as stored
	Attempts  int       // attempts spent, the succeeding one included
	StartedAt time.Time // when the succeeding attempt was claimed (the server's clock)
	Result    []byte    // job.SetResult's; nil when none
	Progress  *job.Progress
}

// BatchEnd is the ending of a batch member recorded in its shard (by
// Settle's ack or kill of an Op with Batch set, a cancel, or the claim
// that found it expired), for EndBatch to count.
type BatchEnd struct {
	ID    string // the member's job id, in the shard
	Batch string // its batch
	Dead  bool   // dead-lettered (killed, or expired), not acked
	Gone  bool   // ended without success and without a dead record: cancelled before it ran, or expired and dropped
}

// Ending is the record's mark of the ending: "s" succeeded, "d" dead,
// "x" gone.
func (e BatchEnd) Ending() string {
	switch {
	case e.Gone:
		return "x"
	case e.Dead:
		return "d"
	}
	return "s"
}

// ParseBatchEnd reads the record of member id's ending, "<batch>\n<s|d|x>";
// ok is false for a record of another form.
func ParseBatchEnd(id, rec string) (e BatchEnd, ok bool) {
	j := strings.LastIndexByte(rec, '\n')
	if j < 0 {
		return BatchEnd{}, false
	}
	switch rec[j+1:] {
	case "s":
	case "d":
		e.Dead = true
	case "x":
		e.Gone = true
	default:
		return BatchEnd{}, false
	}
	e.ID, e.Batch = id, rec[:j]
	return e, true
}

// Settled is what became of one Op: its time (the new ready time of a
// retry, the died-at of a kill), or an error wrapping broker.ErrLeaseLost
// (nothing changed for that job) or ErrLeaseLive (an expired op
// found the lease extended).
type Settled struct {
	At  time.Time
	Err error
	// Trims, on the first kill of a call whose kills trimmed the dead
	// letters (nil otherwise), says what was trimmed.
	Trims *Trims
}

// Trims is what one Settle call trimmed from its shard's dead letters.
type Trims struct {
	ByCap, ByAge     int64 // records dropped by the cap, and by age
	Kept, Unarchived int64 // of those, kept for TakeTrimmed, and not kept for want of room
	// Warn: this call claimed the queue's warning of trims by the cap
	// (at most one a minute across all workers).
	Warn   bool
	Cap    int           // the broker's DeadCap (for the queue; negative: none)
	MaxAge time.Duration // the broker's DeadMaxAge
}

// Broker is the protocol.
type Broker interface {
	// Shards resolves the physical queues of a queue, and lists the queue
	// again if this process has not for keyspace.RelistEvery: a queue a
	// worker serves is in use.
	Shards(ctx context.Context, queue string) ([]keyspace.Shard, error)
	// ForgetIdle unlists the namespace's queues unused for idle that hold
	// nothing (admin.Broker.ForgetIdle) and returns their names.
	ForgetIdle(ctx context.Context, idle time.Duration) ([]string, error)
	// Claim leases up to n due jobs of s for lease each, in ready-time
	// order. A call with the id of w's last claim on s replays it: it
	// returns the jobs of that claim still held under its tokens, and
	// claims nothing new. With broker.Options.WaitReplicas, a claim that
	// replicas did not confirm returns its jobs with an error wrapping
	// broker.ErrNotReplicated.
	Claim(ctx context.Context, s keyspace.Shard, w Caller, id string, n int, lease time.Duration) (ClaimResult, error)
	// Settle records ops, all of shard s, in one call: the result of each
	// in order, or an error for the whole call (a Redis error, after which
	// the call may be sent again with the same id: it is applied once).
	// With WaitReplicas, results come with an error wrapping
	// broker.ErrNotReplicated when replicas did not confirm them.
	Settle(ctx context.Context, s keyspace.Shard, w Caller, lane Lane, id string, ops []Op) ([]Settled, error)
	// Extend pushes the deadline of held leases to now + lease. It returns
	// nil, or a *job.BatchError aligned with leases whose entries wrap
	// broker.ErrLeaseLost, broker.ErrCancelled (extended, but the job was
	// asked to stop) or a Redis error.
	Extend(ctx context.Context, lease time.Duration, leases ...Lease) error
	// Reap lists up to limit jobs of s whose lease has run out, changing
	// nothing about them: the caller settles each (Expired) with the token
	// read here.
	Reap(ctx context.Context, s keyspace.Shard, limit int) (ReapResult, error)
	// Progress stores the progress of the running job of lease l, fenced
	// by its token (an error wrapping broker.ErrLeaseLost when the lease
	// is gone), and returns the server's time of it.
	Progress(ctx context.Context, l Lease, p job.Progress) (time.Time, error)
	// Chain prepares the next jobs of the job of lease parent, whose
	// envelope is env (job.Then, job.Next), for its ack: a next job
	// without an id gets an id derived from the parent's (rules.ChainID). Those that live in another shard are
	// enqueued here, remembered for rules.ChainRemember (24 h) after they end (an id
	// found pending or remembered counts as enqueued); so are all next jobs
	// of a batch member, which join its batch. Those of parent's shard are
	// returned, for Settle to store with the ack. Errors wrap
	// job.ErrInvalid for a next job the broker refuses; any error means
	// the parent must not be acked.
	Chain(ctx context.Context, parent Lease, env *job.Envelope, next []*job.Envelope) ([]*job.Envelope, error)
	// EndBatch counts the endings of batch members of s into their
	// batches, enqueues the callbacks that became due, and drops the
	// records Settle kept. It may be repeated: an ending counts once.
	EndBatch(ctx context.Context, s keyspace.Shard, ends []BatchEnd) error
	// TakeTrimmed removes up to n of the dead records that s kept when it
	// trimmed them (Caller.KeepTrimmed), oldest first, and returns them:
	// each is returned by one call only.
	TakeTrimmed(ctx context.Context, s keyspace.Shard, n int) ([]job.TrimmedRecord, error)
	// SweepBatches counts up to limit endings of batch members of s that
	// were recorded but never counted (their worker died after Settle),
	// and returns how many it found.
	SweepBatches(ctx context.Context, s keyspace.Shard, limit int) (int, error)
	// Wakeups subscribes to the wake-up notices of queues: a queue's name
	// arrives when a job becomes its earliest while nothing there is due.
	// stop unsubscribes and closes the channel.
	Wakeups(ctx context.Context, queues []string) (notices <-chan string, stop func())
	// Cancels subscribes to the cancel notices of queues: a running job
	// asked to stop (broker.Broker.Cancel). Notices are hints; Extend
	// reports the same request (an error wrapping broker.ErrCancelled).
	// stop unsubscribes and closes the channel.
	Cancels(ctx context.Context, queues []string) (notices <-chan CancelNotice, stop func())
}

// CancelNotice asks the worker that holds a lease to stop its job.
type CancelNotice struct {
	Queue string // the user's queue
	ID    string
	Token int64
}

// Key is the argument of the method by which a *broker.Broker hands out
// its [Seams]. Only delayq's own module can name it (the package is
// internal), so no program can call that method.
type Key struct{ _ [0]func() }

// Seams is what a *broker.Broker is to this package: the holder of a
// protocol, which a test of this module may wrap, of a dead-letter store
// and of the clock its scripts read. A *broker.Broker returns it from its
// method Seams(Key).
type Seams interface {
	// WorkerProtocol returns the broker's protocol, wrapped while a test
	// intercepts it.
	WorkerProtocol() Broker
	// InterceptProtocol makes WorkerProtocol return wrap of the protocol
	// until undo is called; ok is false when the broker is intercepted
	// already.
	InterceptProtocol(wrap func(Broker) Broker) (undo func(), ok bool)
	// UseClock makes the broker's scripts read now (ms) instead of the
	// Redis server's TIME, and the times it records come from it too.
	UseClock(now func() time.Time)
	// DeadLetters returns the broker's dead-letter store.
	DeadLetters() DeadStore
	// Admin returns the broker's operator's side (internal/admin).
	Admin() admin.Broker
}

// holder is a *broker.Broker, as this package sees it.
type holder interface{ Seams(Key) Seams }

// seamsOf returns the seams of b, a *broker.Broker; ok is false for
// anything else.
func seamsOf(b any) (Seams, bool) {
	h, ok := b.(holder)
	if !ok || h == nil {
		return nil, false
	}
	return h.Seams(Key{}), true
}

// seams returns the seams of b, a *broker.Broker; it panics for anything
// else: callers hold a broker by type.
func seams(b any) Seams {
	if s, ok := seamsOf(b); ok {
		return s
	}
	panic(fmt.Sprintf("protocol: %T is not a *broker.Broker", b))
}

// DeadCursor marks a position in a queue's dead list, newest first. The
// zero value starts at the newest record.
type DeadCursor struct {
	DiedAt time.Time
	ID     string
}

// IsZero reports whether c is the start of the list.
func (c DeadCursor) IsZero() bool { return c.ID == "" }

// DeadStore is a broker's dead-letter store, one queue at a time: the
// primitives behind package deadletter, the one public API of dead
// letters. A queue's name is checked (job.ErrInvalid); its shards are the
// broker's business.
type DeadStore interface {
	// Page returns up to limit dead records of queue older than the
	// cursor, newest first, and the cursor of the next page (zero when
	// there is none). Records inserted or removed meanwhile do not cause
	// gaps or repeats among the others; a sharded queue's shards are
	// merged.
	Page(ctx context.Context, queue string, after DeadCursor, limit int) ([]*job.DeadRecord, DeadCursor, error)
	// Get returns one dead record, or an error wrapping ErrNotFound.
	Get(ctx context.Context, queue, id string) (*job.DeadRecord, error)
	// Redrive moves dead jobs back to the schedule, ready after delay.
	Redrive(ctx context.Context, queue string, delay time.Duration, ids ...string) error
	// Delete removes dead records.
	Delete(ctx context.Context, queue string, ids ...string) error
	// Purge removes every dead record of queue and says how many.
	Purge(ctx context.Context, queue string) (int64, error)
	// Trim applies the retention rules (cap and max age) now and says how
	// many records it removed.
	Trim(ctx context.Context, queue string) (int64, error)
}

// Dead returns the dead-letter store of b, a *broker.Broker. It panics for
// anything else, as For does.
func Dead(b any) DeadStore { return seams(b).DeadLetters() }

// Admin returns the operator's side of b, a *broker.Broker: what the CLI
// and the dashboard read and do beyond its producer's API. It panics for
// anything else, as For does.
func Admin(b any) admin.Broker { return seams(b).Admin() }

// For returns the protocol of b, a *broker.Broker (wrapped, if a test
// intercepts it). It panics for anything else: callers hold a broker by
// type.
func For(b any) Broker { return seams(b).WorkerProtocol() }

// UseClock makes broker b (a *broker.Broker) read the time from now
// instead of the Redis server's TIME: for tests with a simulated clock and
// the CLI's hidden --now flag. Call it before b is used. It panics for
// another type.
func UseClock(b any, now func() time.Time) { seams(b).UseClock(now) }

// TB is the part of testing.TB that Intercept uses (so that this package,
// which workers link, does not import testing).
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Intercept is the failure-injecting test seam: until the test ends, For(b)
// returns wrap of b's protocol, so a worker built on b meanwhile talks to
// the wrapper. Workers that must not be intercepted get a broker of their
// own (broker.New on the same client).
func Intercept(t TB, b any, wrap func(Broker) Broker) {
	t.Helper()
	p, ok := seamsOf(b)
	if !ok {
		t.Fatalf("protocol: %T is not a *broker.Broker", b)
		return
	}
	undo, ok := p.InterceptProtocol(wrap)
	if !ok {
		t.Fatalf("protocol: broker %p is intercepted already", b)
		return
	}
	t.Cleanup(undo)
}

// The bounds of a page of dead records (package deadletter): a page holds
// DeadPageDefault records unless asked for another count, at most
// DeadPageMax (also the most records one bulk batch handles); a filtered
// List call reads at most DeadScanDefault records unless given another
// budget. The CLI and the dashboard use the same numbers.
const (
	DeadPageDefault = 50
	DeadPageMax     = 1000
	DeadScanDefault = 10_000
)
