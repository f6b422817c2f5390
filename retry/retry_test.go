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

func ExampleExponential() {
	p := retry.Exponential{Initial: time.Second, Multiplier: 2, Max: 10 * time.Second} // no jitter: exact
	for attempt := 1; attempt <= 5; attempt++ {
		fmt.Print(p.Delay(attempt), " ")
	}
	fmt.Println()
	// Output: 1s 2s 4s 8s 10s
}
