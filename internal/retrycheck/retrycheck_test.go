package retrycheck_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/retrycheck"
	"github.com/delayq/delayq/retry"
)

func check(e retry.Exponential) error {
	return retrycheck.Exponential(e.Initial, e.Multiplier, e.Max, e.Jitter)
}

func TestExponential(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    retry.Exponential
		want string
	}{
		{retry.Exponential{Multiplier: 2, Max: time.Second}, "initial delay must be > 0"},
		{retry.Exponential{Initial: time.Second, Multiplier: 0.9, Max: time.Second}, "multiplier must be finite and >= 1"},
		{retry.Exponential{Initial: time.Second, Multiplier: 2, Max: time.Millisecond}, "max delay 1ms is below the initial delay 1s"},
		{retry.Exponential{Initial: time.Second, Multiplier: 2, Max: time.Second, Jitter: 1}, "jitter must be in [0, 1)"},
	} {
		if err := check(tc.e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check(%+v) = %v, want %q", tc.e, err, tc.want)
		}
	}
	for _, e := range []retry.Exponential{retry.Default(), {Initial: time.Second, Multiplier: 2, Max: time.Minute, Jitter: 0.5}} {
		if err := check(e); err != nil {
			t.Errorf("check(%+v): %v", e, err)
		}
	}
}

// NaN compares false with everything, so range checks written as "x < 1"
// let it through; such a policy cannot be stored with a job (JSON has no
// NaN) nor compute a delay.
func TestRejectsNaNAndInf(t *testing.T) {
	t.Parallel()
	for _, e := range []retry.Exponential{
		{Initial: time.Second, Multiplier: math.NaN(), Max: time.Hour},
		{Initial: time.Second, Multiplier: math.Inf(1), Max: time.Hour},
		{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: math.NaN()},
		{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: math.Inf(-1)},
	} {
		if err := check(e); err == nil {
			t.Errorf("check(%+v) = nil, want an error", e)
		}
	}
}
