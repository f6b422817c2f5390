// Package rules holds the decisions that the broker and the test kit
// (delayqtest) must make alike: what an enqueue, a cancel or a reschedule
// does given what is stored under the job's id, which envelopes are
// refused (delayq's checks plus the payload cap), and how a succeeded job's
// next jobs are named and checked. The broker makes the storing decisions
// inside its Lua scripts, atomically; its tests check that each script
// decides as the functions here do (TestEnqueueScriptFollowsTheRules), and
// it builds its answers (errors) with them. The kit, which stores nothing
// in Redis, calls the same functions, so a test written against it sees
// what a broker would answer.
//
// The errors are the broker's sentinels and types, re-exported by package
// broker (broker.ErrDuplicate is ErrDuplicate, broker.DuplicateError is
// DuplicateError, ...).
package rules

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

var (
	// ErrDuplicate: another call stored a job with that id (see
	// broker.ErrDuplicate).
	ErrDuplicate = errors.New("broker: a job with that id is already pending")

	// ErrNotFound: no such job in the state the operation needs.
	ErrNotFound = errors.New("broker: job not found")

	// ErrInProgress: a worker holds the job.
	ErrInProgress = errors.New("broker: job is in progress")

	// ErrPayloadTooLarge: the payload is over the broker's cap.
	ErrPayloadTooLarge = errors.New("broker: payload too large")
)

// DuplicateError is the error of an enqueue refused because a job with
// the id is pending in the queue, or is remembered there after it ended
// (job.Unique). It names the existing job; errors.Is(err, ErrDuplicate)
// holds.
type DuplicateError struct {
	Queue string // the user's queue
	ID    string // the id of the job that is pending or remembered
	Ended bool   // the job ended and is remembered (job.Unique), not pending
}

func (e *DuplicateError) Error() string {
	if e.Ended {
		return fmt.Sprintf("%v: id %q in queue %q (it ended and is remembered for its uniqueness window)", ErrDuplicate, e.ID, e.Queue)
	}
	return fmt.Sprintf("%v: id %q in queue %q", ErrDuplicate, e.ID, e.Queue)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// DefaultMaxPayloadBytes is the payload cap of a broker that sets none
// (broker.Options.MaxPayloadBytes 0).
const DefaultMaxPayloadBytes = 1 << 20

// PayloadCap is the cap a MaxPayloadBytes option means: 0 the default,
// negative none (returned as 0).
func PayloadCap(opt int) int {
	switch {
	case opt == 0:
		return DefaultMaxPayloadBytes
	case opt < 0:
		return 0
	}
	return opt
}

// Prepare is job.Prepare (defaults filled in, every field checked) and the
// payload cap: payload and headers (keys and values) together must not be
// over maxPayload bytes (<= 0: no cap). Errors wrap job.ErrInvalid, and
// ErrPayloadTooLarge for the cap.
func Prepare(env *job.Envelope, now time.Time, maxPayload int) error {
	if env == nil {
		return fmt.Errorf("broker: %w: nil envelope", job.ErrInvalid)
	}
	if err := job.Prepare(env, now); err != nil {
		return err
	}
	if maxPayload > 0 {
		size := len(env.Payload)
		for k, v := range env.Headers {
			size += len(k) + len(v)
		}
		if size > maxPayload {
			return fmt.Errorf("broker: %w: %w: payload and headers of job %q are %d bytes, the cap is %d", job.ErrInvalid, ErrPayloadTooLarge, env.ID, size, maxPayload)
		}
	}
	return nil
}

// ReadyMS is an absolute ready time in whole ms, rounded up so that a job
// never becomes due before the instant it was given (scores are ms, and a
// job is due once the server's ms clock reaches its score). It is at least
// 1, as 0 means "use the delay" in the scripts.
func ReadyMS(t time.Time) int64 {
	v := t.UnixMilli()
	if t.After(time.UnixMilli(v)) {
		v++
	}
	return max(v, 1)
}

// ReadyAfter is the ready time in ms of a job ready d after now, as the
// scripts' ready_after reckons it: now's whole ms (rounded down: due at
// once) for d <= 0, else ReadyMS of now + d.
func ReadyAfter(now time.Time, d time.Duration) int64 {
	if d <= 0 {
		return now.UnixMilli()
	}
	return ReadyMS(now.Add(d))
}

// Found is what an enqueue finds under its job's id.
type Found int

const (
	// Absent: no job with the id is pending (nor remembered, for a Unique
	// job).
	Absent Found = iota
	// Scheduled: a job with the id waits for its ready time (or a claim).
	// For a debounced enqueue (see [Debounce]) its ready time is still
	// ahead: its window is open.
	Scheduled
	// Held: a job with the id is pending and a worker holds it (it is
	// running).
	Held
	// Remembered: no job with the id is pending, and a Unique job with it
	// ended within its window. Only enqueues flagged Unique see it.
	Remembered
	// EarlierInCall: a job earlier in the same call has the id.
	EarlierInCall
	// Due: a job with the id is pending, not claimed, and its ready time
	// has passed: due in the schedule, parked by its type's pause, or held
	// back by its type's cap or rate limit. Only a debounced enqueue tells
	// it from Scheduled (its window is closed); to [Enqueue] it is
	// Scheduled.
	Due
)

// Outcome is what an enqueue does.
type Outcome int

const (
	Stored         Outcome = iota // stored as a new job
	Replaced                      // replaced the scheduled job with the id (job.Replace)
	Duplicate                     // refused: the id is pending (or earlier in the call)
	DuplicateEnded                // refused: the id is remembered after its end (job.Unique)
	InProgress                    // refused: job.Replace or job.Debounce found the job held
	Kept                          // job.Debounce found the job due: its envelope replaced, its ready time kept
)

// Enqueue decides an enqueue of a job, flagged unique (job.Unique) and
// replace (job.Replace), that finds found under its id. A job that is not
// Unique does not see what is remembered: Remembered is Absent to it.
// A debounced enqueue is decided by [Debounce] instead. (enqueue.lua
// decides the same inside Redis.)
func Enqueue(found Found, unique, replace bool) Outcome {
	switch found {
	case EarlierInCall:
		return Duplicate
	case Scheduled, Due:
		if replace {
			return Replaced
		}
		return Duplicate
	case Held:
		if replace {
			return InProgress
		}
		return Duplicate
	case Remembered:
		if unique {
			return DuplicateEnded
		}
	}
	return Stored
}

// Earlier is what the jobs earlier in the same call with a job's id left
// under the id, as a debounced enqueue sees it: it acts on what they left,
// as if it came after them in calls of its own.
type Earlier int

const (
	NoneEarlier    Earlier = iota // no job earlier in the call has the id
	EarlierStored                 // the last of them to write stored a job with a new ready time (Stored or Replaced)
	EarlierKept                   // the last of them to write kept a due job's ready time (Kept)
	EarlierRefused                // they were all refused: nothing was written
)

// After is what the call's earlier jobs with the id leave once one more of
// them has outcome o.
func (e Earlier) After(o Outcome) Earlier {
	switch o {
	case Stored, Replaced:
		return EarlierStored
	case Kept:
		return EarlierKept
	}
	if e == NoneEarlier {
		return EarlierRefused
	}
	return e
}

// Debounce decides a debounced enqueue (job.Debounce) of a job that finds
// found under its id before its call, after the jobs earlier in the call
// with the id left earlier. Its window open (Scheduled, or a job the call
// stored with a new ready time): Replaced, ready the window after now. Its
// window closed (Due, or a due job the call kept): Kept. A worker holds
// it: InProgress. Nothing pending (Absent; Remembered is Absent to it, as
// it is not Unique): Stored, unless earlier jobs of the call had the id and
// were all refused: Duplicate. found is never EarlierInCall here: earlier
// says what the call did. (enqueue.lua decides the same inside Redis.)
func Debounce(found Found, earlier Earlier) Outcome {
	switch earlier {
	case EarlierStored:
		return Replaced
	case EarlierKept:
		return Kept
	}
	switch found {
	case Scheduled:
		return Replaced
	case Due:
		return Kept
	case Held:
		return InProgress
	}
	if earlier == EarlierRefused {
		return Duplicate
	}
	return Stored
}

// EnqueueErr is the error of an enqueue of job id in queue with outcome o:
// nil for Stored, Replaced and Kept.
func EnqueueErr(o Outcome, queue, id string) error {
	switch o {
	case Duplicate, DuplicateEnded:
		return &DuplicateError{Queue: queue, ID: id, Ended: o == DuplicateEnded}
	case InProgress:
		return fmt.Errorf("%w: job %q in queue %q is held by a worker and cannot be replaced", ErrInProgress, id, queue)
	}
	return nil
}

// Change decides a cancel or a reschedule of a job that finds found under
// its id (Scheduled: done; Held by a worker: ErrInProgress; otherwise
// ErrNotFound) and returns its error, nil when it is done. (cancel.lua and
// reschedule.lua decide the same inside Redis; a job parked by a pause or
// held back by a cap, Due, counts as Scheduled there.)
func Change(found Found, queue, id string) error {
	switch found {
	case Scheduled, Due:
		return nil
	case Held:
		return fmt.Errorf("%w: job %q in queue %q", ErrInProgress, id, queue)
	}
	return fmt.Errorf("%w: job %q in queue %q", ErrNotFound, id, queue)
}

// NextJobs returns the next jobs of the job id created at created that has
// just succeeded (job.Then's, then those its attempt declared with
// job.Next), ready to enqueue: copies, a job without an ID given
// ChainID(id, created, n), one without a queue naming.DefaultQueue, each
// checked by Prepare with the payload cap. A next job that does not pass
// fails the success: a worker dead-letters the job (the error wraps
// job.ErrInvalid, so it is permanent).
func NextJobs(id string, created time.Time, next []*job.Envelope, now time.Time, maxPayload int) ([]*job.Envelope, error) {
	out := make([]*job.Envelope, len(next))
	for i, n := range next {
		if n == nil {
			return nil, fmt.Errorf("broker: %w: next job %d of job %q is nil", job.ErrInvalid, i+1, id)
		}
		e := *n
		if e.ID == "" {
			e.ID = ChainID(id, created, i+1)
		}
		if e.Queue == "" {
			e.Queue = naming.DefaultQueue
		}
		if err := Prepare(&e, now, maxPayload); err != nil {
			return nil, fmt.Errorf("broker: next job %d of job %q: %w", i+1, id, err)
		}
		out[i] = &e
	}
	return out, nil
}

// CheckRateLimit checks a rate limit (broker.Broker.SetRateLimit,
// SetKeyRateLimit and the dashboard check it): a zero Count (no limit) or a positive Count with a
// period of at least 1 ms; no negative burst or slack; Slack only with
// Strict, and a strict limit without a burst (it allows Count at once).
func CheckRateLimit(r job.RateLimit) error {
	switch {
	case r.Count < 0:
		return naming.Invalid("rate limit count %d is negative", r.Count)
	case r.Burst < 0:
		return naming.Invalid("rate limit burst %d is negative", r.Burst)
	case r.Count > 0 && r.Per < time.Millisecond:
		return naming.Invalid("rate limit period %s is below 1ms", r.Per)
	case r.Slack < 0:
		return naming.Invalid("rate limit slack %s is negative", r.Slack)
	case r.Slack > 0 && !r.Strict:
		return naming.Invalid("rate limit slack %s without Strict (it widens a strict window only)", r.Slack)
	case r.Strict && r.Burst > 1:
		return naming.Invalid("strict rate limit with burst %d (a strict window allows Count at once; leave Burst 0)", r.Burst)
	}
	return nil
}

// ChainRemember is how long the id of a next job that lives in another
// slot than its parent is remembered after it ended, as job.Unique would:
// should the parent run again after the next job was enqueued but before
// the parent's acknowledgement (its worker died in between), its second
// success finds the id pending or remembered and does not enqueue the next
// job again.
const ChainRemember = 24 * time.Hour

// ChainID is the id of the n-th next job (from 1) of the job id that was
// created at created, for a next job declared without an id (job.Then, job.Next):
// "<id>><n>@<created ms, base 36>". The creation time tells apart two jobs
// enqueued under one id one after the other, so that the next jobs of the
// second are not taken for those of the first. An id that would be longer
// than naming.MaxIDLen is replaced by a hash of the same parts.
func ChainID(id string, created time.Time, n int) string {
	s := id + ">" + strconv.Itoa(n) + "@" + strconv.FormatInt(created.UnixMilli(), 36)
	if len(s) <= naming.MaxIDLen {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return "c:" + chainIDEncoding.EncodeToString(h[:20])
}

var chainIDEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// Policy is the retry policy of an attempt of m: the job's own backoff,
// else its type's policy (typ), else fallback (a worker's default). Every
// place that decides a failed attempt (the worker, delayqtest.Runner)
// picks it here.
func Policy(m *job.Message, typ, fallback retry.Policy) retry.Policy {
	switch {
	case m.Backoff != nil:
		return retry.Exponential{Initial: m.Backoff.Initial, Multiplier: m.Backoff.Multiplier, Max: m.Backoff.Max, Jitter: m.Backoff.Jitter}
	case typ != nil:
		return typ
	}
	return fallback
}
