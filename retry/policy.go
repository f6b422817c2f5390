package retry

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy gives the delay before the next attempt of a job whose attempt
// number attempt (1 for the first) just failed. Implementations must be safe
// for concurrent use.
type Policy interface {
	Delay(attempt int) time.Duration
}

// Exponential is a Policy whose delay grows geometrically with the attempt
// number, with random jitter:
//
//	base(n)  = min(Initial × Multiplierⁿ⁻¹, Max)
//	delay(n) = base(n) × (1 ± Jitter), drawn uniformly
//
// With [Default] (Initial 1s, Multiplier 2, Max 1h, Jitter 0.2) the delays
// after attempts 1, 2, 3, … are about
//
//	1s, 2s, 4s, 8s, 16s, 32s, 1m4s, 2m8s, 4m16s, 8m32s, 17m4s, 34m8s, 1h, 1h, …
//
// each within ±20 %. The zero value is not usable; set its fields (each
// comment says its range) or take [Default]. Where an Exponential is given
// (job.WithBackoff, job.Retry, worker.Options.Retry), a parameter out of
// range is refused, by job.WithBackoff or worker.New, with an error that
// wraps job.ErrInvalid and names it. An
// Exponential is immutable and safe for concurrent use: every call builds
// its own backoff state.
type Exponential struct {
	Initial    time.Duration // delay after the first failure; > 0
	Multiplier float64       // growth per attempt; >= 1
	Max        time.Duration // cap on the base delay; >= Initial
	Jitter     float64       // randomization factor in [0, 1); 0 disables jitter
}

// Default returns the policy used when neither the job nor its type sets
// one: Initial 1s, Multiplier 2, Max 1h, Jitter 0.2.
func Default() Exponential {
	return Exponential{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 0.2}
}

// Delay returns the jittered delay after attempt (1 for the first failure).
// Attempts below 1 are treated as 1.
func (e Exponential) Delay(attempt int) time.Duration {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     e.Initial,
		RandomizationFactor: e.Jitter,
		Multiplier:          e.Multiplier,
		MaxInterval:         e.Max,
		MaxElapsedTime:      0, // the budget is counted in attempts, across processes
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	// NextBackOff jitters around the current interval and then grows it; the
	// growth itself is deterministic, so the n-th call has the n-th base.
	d := b.NextBackOff()
	for i := 1; i < attempt; i++ {
		d = b.NextBackOff()
	}
	return d
}

// Constant is a Policy that always waits the same delay.
type Constant time.Duration

// Delay returns the constant delay.
func (c Constant) Delay(int) time.Duration { return time.Duration(c) }
