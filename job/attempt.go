package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/attempt"
)

// What a handler can tell the worker about the attempt it runs: a result
// to keep with the succeeded job (SetResult), how far it has come
// (ReportProgress) and the jobs that follow it (Next). The worker puts the
// attempt in the handler's context.

// ErrNoAttempt is returned by [SetResult], [ReportProgress] and [Next] when the
// context is not a handler's (no worker runs the job).
var ErrNoAttempt = errors.New("job: the context is not a handler's: no worker runs this job")

// maxResultSize is the largest result SetResult keeps, in bytes (1 MiB).
const maxResultSize = 1 << 20

// maxProgressMessage is the longest progress message, in bytes.
const maxProgressMessage = 200

// Progress is how far a running job has come, as its handler last said.
type Progress struct {
	Fraction float64   // 0 to 1
	Message  string    // at most 200 bytes
	At       time.Time // when it was reported (the server's clock)
}

// jobAttempt is one handling attempt as package job sees it: what its
// handler said during it, and the [OnResult] callbacks that learn what
// became of it. The worker puts one in the handler's context.
type jobAttempt = attempt.Attempt[Envelope, Result, Progress]

// attemptOf returns the attempt of a handler's context, or nil.
func attemptOf(ctx context.Context) *jobAttempt {
	return attempt.Of[Envelope, Result, Progress](ctx)
}

// SetResult keeps result with the job when this attempt succeeds and the
// job is retained ([Retain]); a later call replaces an earlier one. The
// bytes are copied. It returns an error wrapping ErrInvalid for a result
// over 1 MiB, or ErrNoAttempt outside a handler.
func SetResult(ctx context.Context, result []byte) error {
	a := attemptOf(ctx)
	if a == nil {
		return ErrNoAttempt
	}
	if len(result) > maxResultSize {
		return invalid("result of %d bytes is over the limit of %d", len(result), maxResultSize)
	}
	a.SetResult(append([]byte(nil), result...))
	return nil
}

// ReportProgress records how far the running job has come: fraction from
// 0 to 1 and a short message (at most 200 bytes of UTF-8).
// It is visible in Broker.Job (and the CLI and dashboard) while the job
// runs, and kept with a retained succeeded job. Each call is one round
// trip to Redis, fenced like an ack: a worker that lost the lease gets an
// error wrapping broker.ErrLeaseLost. Errors wrap ErrInvalid for a bad
// fraction or message; ErrNoAttempt outside a handler.
func ReportProgress(ctx context.Context, fraction float64, msg string) error {
	a := attemptOf(ctx)
	if a == nil {
		return ErrNoAttempt
	}
	if math.IsNaN(fraction) || fraction < 0 || fraction > 1 {
		return invalid("progress fraction %v is outside 0..1", fraction)
	}
	if len(msg) > maxProgressMessage || !utf8.ValidString(msg) {
		return invalid("progress message must be at most %d bytes of UTF-8, not %d bytes", maxProgressMessage, len(msg))
	}
	p := Progress{Fraction: fraction, Message: msg, At: time.Now()}
	at, stored, err := a.Report(ctx, p)
	if err != nil {
		return fmt.Errorf("job: report progress: %w", err)
	}
	if stored {
		p.At = at
	}
	a.SetProgress(p)
	return nil
}

// HandleResult registers fn as the handler of t's jobs, like [Type.Handle],
// for a handler that returns a typed result: on success its JSON encoding
// is kept with the job as by SetResult (read it back with [ResultAs]). It
// panics as Handle does.
func HandleResult[T, R any](t *Type[T], r *Registry, fn func(ctx context.Context, j *Job[T]) (R, error)) {
	t.Handle(r, func(ctx context.Context, j *Job[T]) error {
		res, err := fn(ctx, j)
		if err != nil {
			return err
		}
		b, err := json.Marshal(res)
		if err != nil {
			return fmt.Errorf("job: encode the result of job type %q: %w", t.name, err)
		}
		if err := SetResult(ctx, b); err != nil && !errors.Is(err, ErrNoAttempt) {
			return err
		}
		return nil
	})
}

// ResultAs decodes the JSON result of a succeeded job (see HandleResult).
// It returns an error wrapping ErrInvalid when the job is not succeeded or
// has no result, or the JSON error.
func ResultAs[R any](info *JobInfo) (R, error) {
	var v R
	if info == nil || info.State != StateSucceeded {
		return v, invalid("no result: the job is not succeeded")
	}
	if info.Result == nil {
		return v, invalid("job %q succeeded without a result", info.ID)
	}
	if err := json.Unmarshal(info.Result, &v); err != nil {
		return v, fmt.Errorf("job: result of job %q: %w", info.ID, err)
	}
	return v, nil
}
