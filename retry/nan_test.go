package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/delayq/delayq/retry"
)

// TestValidateRejectsNaNAndInf: NaN compares false with everything, so range
// checks written as "x < 1" let it through; such a policy cannot be stored
// with a job (JSON has no NaN) nor compute a delay.
func TestValidateRejectsNaNAndInf(t *testing.T) {
	t.Parallel()
	for _, e := range []retry.Exponential{
		{Initial: time.Second, Multiplier: math.NaN(), Max: time.Hour},
		{Initial: time.Second, Multiplier: math.Inf(1), Max: time.Hour},
		{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: math.NaN()},
		{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: math.Inf(-1)},
	} {
		if err := e.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", e)
		}
	}
	if err := retry.Default().Validate(); err != nil {
		t.Fatal(err)
	}
}
