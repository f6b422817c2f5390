package retry_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/retry"
)

func TestExponentialWithinJitter(t *testing.T) {
	t.Parallel()
	p := retry.Default()
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 12: 2048 * time.Second, 13: time.Hour, 40: time.Hour} {
		lo, hi := time.Duration(float64(base)*0.8), time.Duration(float64(base)*1.2)
		var minSeen, maxSeen time.Duration = time.Duration(1 << 62), 0
		for range 200 {
			d := p.Delay(attempt)
			if d < lo || d > hi {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, lo, hi)
			}
			minSeen, maxSeen = min(minSeen, d), max(maxSeen, d)
		}
		if maxSeen-minSeen < (hi-lo)/4 {
			t.Errorf("attempt %d: delays span only %v..%v: no jitter?", attempt, minSeen, maxSeen)
		}
	}
}

func TestExponentialWithoutJitterIsExact(t *testing.T) {
	t.Parallel()
	p := retry.Exponential{Initial: 100 * time.Millisecond, Multiplier: 3, Max: 2 * time.Second}
	var got []string
	for a := 0; a <= 5; a++ {
		got = append(got, p.Delay(a).String())
	}
	if s := strings.Join(got, " "); s != "100ms 100ms 300ms 900ms 2s 2s" {
		t.Fatalf("schedule %s", s)
	}
}

func TestExponentialValidate(t *testing.T) {
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
		if err := tc.e.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.e, err, tc.want)
		}
	}
	if err := (retry.Exponential{Initial: time.Second, Multiplier: 2, Max: time.Minute, Jitter: 0.5}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func ExampleExponential() {
	p := retry.Exponential{Initial: time.Second, Multiplier: 2, Max: 10 * time.Second} // no jitter: exact
	for attempt := 1; attempt <= 5; attempt++ {
		fmt.Print(p.Delay(attempt), " ")
	}
	fmt.Println()
	// Output: 1s 2s 4s 8s 10s
}
