package retry_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/retry"
)

// A handler returns a Permanent error for a failure no retry can fix: the
// job goes straight to the dead letters. Wrapping keeps it permanent.
func ExamplePermanent() {
	expired := errors.New("card expired")
	err := fmt.Errorf("charge order 1001: %w", retry.Permanent(expired))
	fmt.Println(errors.Is(err, expired), err)
	fmt.Println(retry.Permanent(nil) == nil)
	// Output:
	// true charge order 1001: card expired
	// true
}

// A handler that was told when to come back (an HTTP 429 with
// "Retry-After: 30") returns After: the next attempt is exactly 30s later,
// whatever the backoff policy says.
func ExampleAfter() {
	err := retry.After(30*time.Second, errors.New("provider: 429 rate-limited"))
	fmt.Println(err)
	// Output:
	// retry after 30s: provider: 429 rate-limited
}
