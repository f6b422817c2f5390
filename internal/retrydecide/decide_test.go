package retrydecide_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/retry"
)

func TestPermanentAndAfter(t *testing.T) {
	t.Parallel()
	base := errors.New("card declined")
	if retry.Permanent(nil) != nil || retry.After(time.Second, nil) != nil {
		t.Fatal("wrapping nil must give nil")
	}
	p := fmt.Errorf("charge: %w", retry.Permanent(base))
	if !retrydecide.IsPermanent(p) || !errors.Is(p, base) || retrydecide.IsPermanent(base) {
		t.Fatalf("IsPermanent/Is broken for %v", p)
	}
	a := fmt.Errorf("call: %w", retry.After(3*time.Second, base))
	if d, ok := retrydecide.AfterDelay(a); !ok || d != 3*time.Second || !errors.Is(a, base) {
		t.Fatalf("AfterDelay = %v, %v", d, ok)
	}
	if d, _ := retrydecide.AfterDelay(retry.After(-time.Second, base)); d != 0 {
		t.Fatalf("negative After delay kept: %v", d)
	}
	if _, ok := retrydecide.AfterDelay(base); ok {
		t.Fatal("AfterDelay on a plain error")
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	policy := retry.Constant(7 * time.Second)
	for name, tc := range map[string]struct {
		attempt, max int
		err          error
		want         retrydecide.Decision
	}{
		"policy":    {1, 3, base, retrydecide.Decision{Delay: 7 * time.Second, Reason: "retry policy"}},
		"after":     {1, 3, retry.After(time.Minute, base), retrydecide.Decision{Delay: time.Minute, Reason: "retry.After"}},
		"snooze":    {9, 3, retry.Snooze(time.Hour), retrydecide.Decision{Snooze: true, Delay: time.Hour, Reason: "retry.Snooze"}},
		"permanent": {1, 3, retry.Permanent(fmt.Errorf("wrapped: %w", retry.Snooze(time.Hour))), retrydecide.Decision{Dead: true, Reason: "permanent error"}},
		"exhausted": {4, 3, base, retrydecide.Decision{Dead: true, Reason: "retries exhausted (attempt 4, max retries 3)"}},
	} {
		if got := retrydecide.Decide(tc.attempt, tc.max, policy, tc.err); got != tc.want {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
	if d, ok := retrydecide.SnoozeDelay(fmt.Errorf("x: %w", retry.Snooze(-time.Second))); !ok || d != 0 {
		t.Errorf("SnoozeDelay of a negative snooze = %v, %v", d, ok)
	}
}
