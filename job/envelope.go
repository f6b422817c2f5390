package job

import (
	"fmt"
	"time"

	"github.com/delayq/delayq/retry"
)

// Envelope is one job as the broker stores it, plus where and when it goes.
//
// ID and Queue are part of the key, not of the stored body. Delay and At say
// when the job becomes ready and are read only at enqueue; ReadyAt is filled
// in by the broker (on enqueue and on claim) with the ready time it stored,
// in the Redis server's clock.
type Envelope struct {
	ID         string            // unique within the queue while pending; generated when empty
	Queue      string            // queue name; "default" when empty
	Type       string            // job type name: selects the handler
	Payload    []byte            // encoded arguments
	MaxRetries int               // retries after the first attempt; 0 means none
	Timeout    time.Duration     // per-attempt handler deadline; 0 means the type's or worker's
	CreatedAt  time.Time         // when the job was first enqueued
	Backoff    *Backoff          // per-job retry schedule; nil means the type's policy
	Headers    map[string]string // metadata, e.g. W3C trace context
	LastError  string            // the error of the last failed attempt

	Delay   time.Duration // ready this long after the server's now (enqueue only)
	At      time.Time     // ready at this instant; wins over Delay when set (enqueue only)
	ReadyAt time.Time     // the ready time stored by the broker

	// Unique refuses a second job with the same id while this one is
	// pending, and for UniqueFor after it succeeded (or died, with
	// UniqueDead); with no ID the broker derives one from Type and
	// Payload ([UniqueID]). Stored, so that the worker remembers the job
	// when it ends.
	Unique     bool
	UniqueFor  time.Duration // how long the id is remembered after the job ended; 0: only while pending
	UniqueDead bool          // a dead ending is remembered too

	// Replace (enqueue only): a pending scheduled job with the id gets this
	// envelope and ready time instead; broker.ErrInProgress when a worker
	// holds it.
	Replace bool

	// Debounce (enqueue only), a window over 0: the job's id is its
	// debounce key. While a job with the id is scheduled and not yet due
	// (inside its window), the enqueue replaces its envelope and moves
	// its ready time to Debounce after the server's now, atomically; a
	// job with the id that is due but not claimed gets the envelope and
	// keeps its ready time; one a worker holds is not replaced
	// (broker.ErrInProgress). With no pending job the enqueue stores a new
	// one, ready Debounce from now. Needs an ID; refused with Unique,
	// Replace, In/At (Delay, At) and in a batch or a chain. See [Debounce].
	Debounce time.Duration

	// ExpireAt: a job not started by then never runs; the claim that finds
	// it expired dead-letters it with reason "expired", or drops it and
	// counts it when DropExpired is set. Zero means never.
	ExpireAt    time.Time
	DropExpired bool

	// Snoozes counts the times the job snoozed (retry.Snooze), up to
	// retry.MaxSnoozes.
	Snoozes int

	// Batch is the id of the batch the job is a member of, "" for none.
	// Broker.AddToBatch sets it; the worker reports the member's ending
	// (success or dead) to the batch. See docs/batches.md.
	Batch string

	// Retain is how long the job is kept after it succeeded, with its
	// result, attempts and timings (job.Retain); 0 deletes it at the ack.
	Retain time.Duration

	// Next are the jobs enqueued when this one succeeds (job.Then), in
	// order; see docs/batches.md, "Chains".
	Next []*Envelope

	// Key is the job's flow-control key ([Key], [KeyFrom]): a customer,
	// a recipient, an account. A queue's per-key concurrency cap
	// (broker.Broker.SetKeyConcurrency) counts the running jobs of each
	// key. "" for none. See [Key].
	Key string
}

// Backoff is a per-job exponential retry schedule, stored with the job. It
// overrides the type's retry policy; see retry.Exponential for the formula.
type Backoff struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     float64
}

// validate reports whether b is a usable schedule, by the rules of
// retry.Exponential.Validate. Errors wrap ErrInvalid.
func (b *Backoff) validate() error {
	e := retry.Exponential{Initial: b.Initial, Multiplier: b.Multiplier, Max: b.Max, Jitter: b.Jitter}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("job: %w: %v", ErrInvalid, err)
	}
	return nil
}
