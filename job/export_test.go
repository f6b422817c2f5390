package job

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/attempt"
)

// ValidateHeader is validateHeader, for the fuzz tests of package job_test.
var ValidateHeader = validateHeader

// The limits the package keeps unexported, for the tests of package job_test.
const (
	MaxResultSize      = maxResultSize
	MaxProgressMessage = maxProgressMessage
	MaxErrorLen        = maxErrorLen
	MaxNext            = maxNext
)

// WithAttempt returns ctx carrying a new attempt, as a worker makes one, for
// the tests of package job_test.
func WithAttempt(ctx context.Context, report func(context.Context, Progress) (time.Time, error)) (context.Context, *attempt.Attempt[Envelope, Result, Progress]) {
	return attempt.With[Envelope, Result, Progress](ctx, report)
}

// Validate is validate, for the tests of package job_test.
func (b *Backoff) Validate() error { return b.validate() }
