package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/delayq/delayq/job"
)

// One answer per call.
//
// Every public call that changes jobs (Enqueue, Cancel,
// Reschedule, RescheduleAfter, and deadletter's Redrive and Delete) gets a call id when it
// is made. Its scripts keep the call's first outcome under that id, in a
// key of the job's shard that expires after Options.ResendWindow
// (ns:{q}:c:<call id>; a batch Enqueue keeps one per script call, under
// the call id and the chunk's number, and single Enqueues that share a
// script call keep one each), and a script that finds the key answers with
// what it holds and changes nothing. So a call sent again (by go-redis
// after a lost reply, which sends the same arguments, or by Resend) is
// answered as the first send was, even after the job ran and ended; and a
// different call (another id) is judged on what is stored: an id that is
// pending is a duplicate, whatever the timing, however alike the
// envelopes. Whether a call is a resend is never guessed from the bytes it
// carries.
//
// A record costs one string key for the window and nothing after it: a job
// that runs long after its enqueue carries no trace of the call. What it
// costs is in docs/architecture.md ("Calls of producers and operators").

// callPrefix is the random part of this process's call ids: 10 letters and
// digits (59 bits), drawn once, so that processes do not share ids.
var callPrefix = func() string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var out [10]byte
	var buf [32]byte
	n := 0
	for n < len(out) {
		_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails (Go 1.24+)
		for _, c := range buf {
			if c < 248 && n < len(out) { // 248 = 4 × 62: no bias
				out[n] = alphabet[c%62]
				n++
			}
		}
	}
	return string(out[:])
}()

// callSeq numbers the calls of this process.
var callSeq atomic.Uint64

// callID returns one new call id.
func callID() string {
	return callPrefix + strconv.FormatUint(callSeq.Add(1), 36)
}

// windowArg is the resend window in ms for the scripts' ARGV: 0 keeps no
// record.
func (b *Broker) windowArg() int64 {
	if b.opts.ResendWindow <= 0 {
		return 0
	}
	return max(b.opts.ResendWindow.Milliseconds(), 1)
}

// CallError is the error of a call whose outcome the caller cannot take as
// final: its reply was lost, so it may or may not have been made
// (errors.Is(err, ErrOutcomeUnknown)), or it was made on the master and
// fewer replicas than Options.WaitReplicas confirmed it
// (errors.Is(err, ErrNotReplicated)). Resend sends the very call again, with
// its call ids: within Options.ResendWindow of the first send, the answer is
// the first outcome (a job the call stored: nil, even if the job ran and
// ended since; a duplicate: ErrDuplicate), and nothing is done twice. A new
// call with the same envelope is not a resend: it is judged on what is
// stored (ErrDuplicate while the job is pending, stored again once it
// ended).
//
// For a call about several jobs (a batch Enqueue, a Redrive or Delete
// of several ids), each failed job's entry in the *job.BatchError is a
// CallError, and Resend on any of them sends the whole call again: the
// answer is aligned with the call, as the first one was.
type CallError struct {
	Op     string // "enqueue", "cancel", "reschedule", "redrive" or "dead delete"
	Queue  string // the user's queue
	ID     string // the job
	CallID string // the id the call was sent with (a batch Enqueue's: with its chunk's number)
	Err    error  // wraps ErrOutcomeUnknown or ErrNotReplicated, and the cause

	resend func(ctx context.Context) error
}

func (e *CallError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *CallError) Unwrap() error { return e.Err }

// Resend sends again the call that err is the error of, when err is (or
// wraps, as in a *job.BatchError) a *CallError: a call whose reply was lost
// (ErrOutcomeUnknown) or that the replicas did not confirm
// (ErrNotReplicated). Otherwise it returns err unchanged. It sends the
// call with its call ids and returns its outcome as the call returns it
// (nil, or an error; a *job.BatchError aligned with the call for one about
// several jobs); a resend whose reply is lost again returns a *CallError
// again. It is the one way to repeat a call whose outcome is unknown:
//
//	err := b.Enqueue(ctx, env)
//	if errors.Is(err, broker.ErrOutcomeUnknown) || errors.Is(err, broker.ErrNotReplicated) {
//		err = broker.Resend(ctx, err) // nil: stored once, by this call
//	}
//
// See CallError.
func Resend(ctx context.Context, err error) error {
	var ce *CallError
	if !errors.As(err, &ce) || ce.resend == nil {
		return err
	}
	return ce.resend(ctx)
}

// unsure reports whether err leaves the outcome of a call for the caller to
// settle with Resend: the reply was lost, or the replicas fell short.
func unsure(err error) bool {
	return outcomeUnknown(err) || errors.Is(err, ErrNotReplicated)
}

// unsureErr is the error of a call of op on the job id of queue, sent with
// call id cid, that failed with err, which leaves its outcome open (see
// unsure): a *CallError without its resend, which the caller sets
// (resendable) to what sends the whole call again.
func unsureErr(op, queue, id, cid string, err error) *CallError {
	if errors.Is(err, ErrNotReplicated) {
		err = fmt.Errorf("%s of job %q in queue %q: %w", op, id, queue, err)
	} else {
		err = fmt.Errorf("%w: %s of job %q in queue %q: %w", ErrOutcomeUnknown, op, id, queue, err)
	}
	return &CallError{Op: op, Queue: queue, ID: id, CallID: cid, Err: err}
}

// resendable sets resend on the CallErrors in err (itself, or the entries
// of a *job.BatchError) that have none yet, and returns err.
func resendable(err error, resend func(context.Context) error) error {
	var be *job.BatchError
	if errors.As(err, &be) {
		for _, e := range be.Errs {
			resendable(e, resend)
		}
		return err
	}
	var ce *CallError
	if errors.As(err, &ce) && ce.resend == nil {
		ce.resend = resend
	}
	return err
}
