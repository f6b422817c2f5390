// Package retrycheck checks the parameters of an exponential retry
// schedule (retry.Exponential, job.Backoff) by value, so that package job,
// below package retry's users, and the worker apply the same rules with
// the same errors: job.WithBackoff, a stored job's Backoff, and
// worker.New (Options.Retry and every registered type's policy).
package retrycheck

import (
	"fmt"
	"math"
	"time"
)

// Exponential reports the first parameter of an exponential schedule that
// is out of range, by name: initial > 0, multiplier finite and >= 1,
// max >= initial, jitter in [0, 1).
func Exponential(initial time.Duration, multiplier float64, max time.Duration, jitter float64) error {
	switch {
	case initial <= 0:
		return fmt.Errorf("retry: exponential initial delay must be > 0, got %s", initial)
	case !(multiplier >= 1) || math.IsInf(multiplier, 1):
		return fmt.Errorf("retry: exponential multiplier must be finite and >= 1, got %g", multiplier)
	case max < initial:
		return fmt.Errorf("retry: exponential max delay %s is below the initial delay %s", max, initial)
	case !(jitter >= 0 && jitter < 1):
		return fmt.Errorf("retry: exponential jitter must be in [0, 1), got %g", jitter)
	}
	return nil
}
