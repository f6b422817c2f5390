package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// Chains (job.Then, job.Next): the next jobs of a succeeded job are
// enqueued with its ack. Those that live in the job's own slot go into the
// ack's settle call and are stored atomically with it; the others are
// enqueued just before it, as an idempotent first step, and so are all
// next jobs of a batch member, which join its batch (docs/batches.md,
// "Chains").

func (w workerSide) Chain(ctx context.Context, parent protocol.Lease, env *job.Envelope, next []*job.Envelope) ([]*job.Envelope, error) {
	// Named and checked as the test kit's Runner does (rules.NextJobs).
	checked, err := rules.NextJobs(parent.ID, env.CreatedAt, next, w.b.createdNow(), w.b.opts.MaxPayloadBytes)
	if err != nil {
		return nil, err
	}
	var here, there []*job.Envelope
	for i, e := range checked {
		s, err := w.b.shardOf(ctx, e.Queue, e.ID)
		if err != nil {
			return nil, fmt.Errorf("broker: next job %d of job %q: %w", i+1, parent.ID, err)
		}
		if s.Name() != parent.Shard.Name() || env.Batch != "" {
			// Remembered after its end, so that a second success of the
			// parent (its worker died before the ack) does not enqueue it
			// again.
			e.Unique, e.UniqueFor, e.UniqueDead = true, rules.ChainRemember, true
			there = append(there, e)
			continue
		}
		here = append(here, e)
	}
	if len(there) == 0 {
		return here, nil
	}
	if env.Batch != "" {
		// The next jobs of a batch member are members too, counted in the
		// batch's slot before the member's ending is.
		err = w.b.addToBatch(ctx, env.Batch, "<"+parent.Queue()+"\n"+parent.ID, there)
	} else {
		err = w.b.Enqueue(ctx, there...)
	}
	if err := enqueuedOrPending(err); err != nil {
		return nil, fmt.Errorf("broker: next jobs of job %q: %w", parent.ID, err)
	}
	return here, nil
}

// enqueuedOrPending is err without the duplicates: a next job found pending
// or remembered was enqueued by an earlier success of its parent.
func enqueuedOrPending(err error) error {
	var be *job.BatchError
	if !errors.As(err, &be) {
		if errors.Is(err, ErrDuplicate) {
			return nil
		}
		return err
	}
	var rest []error
	for _, e := range be.Errs {
		if e != nil && !errors.Is(e, ErrDuplicate) {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}

// chainArg encodes next jobs for settle.lua: four lines each, id, ready
// time ms (0: use the delay), delay µs and the stored body. Bodies are
// compact JSON, so a line break never occurs in one.
func chainArg(next []*job.Envelope) (string, error) {
	var sb strings.Builder
	for _, e := range next {
		body, err := e.MarshalBinary()
		if err != nil {
			return "", err
		}
		if bytes.IndexByte(body, '\n') >= 0 {
			return "", fmt.Errorf("broker: next job %q: its body has a line break", e.ID)
		}
		var at int64
		if !e.At.IsZero() {
			at = readyMS(e.At)
		}
		sb.WriteString(e.ID)
		sb.WriteByte('\n')
		sb.WriteString(strconv.FormatInt(at, 10))
		sb.WriteByte('\n')
		sb.WriteString(strconv.FormatInt(durUS(e.Delay), 10))
		sb.WriteByte('\n')
		sb.Write(body)
		sb.WriteByte('\n')
	}
	return sb.String(), nil
}
