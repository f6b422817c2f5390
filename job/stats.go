package job

import (
	"fmt"
	"time"
)

// QueueStats is the state of one queue at one instant of the Redis server's
// clock, as package broker reads it (job.QueueStats is this type). It
// lives here, with the other plain types the packages share, so that code
// that only reads stats (metrics, dashboards) need not depend on the
// broker.
type QueueStats struct {
	Queue      string
	Now        time.Time
	Scheduled  int64 // jobs waiting, due or not
	Due        int64 // of those, ready now
	Processing int64 // jobs leased to workers
	Dead       int64 // dead records
	// ExpiredDropped counts the jobs of job.DropExpired that expired
	// before they started and were dropped, since the queue began.
	ExpiredDropped int64
	// DeadTrimmedCap counts the dead records dropped to keep the queue's
	// dead letters within their cap (broker.Options.DeadCap), and
	// DeadTrimmedAge those dropped for being older than
	// broker.Options.DeadMaxAge, since the queue began. Dead is what is
	// left: Dead + DeadTrimmedCap + DeadTrimmedAge jobs died (less those
	// redriven or deleted by hand).
	DeadTrimmedCap int64
	DeadTrimmedAge int64
	// DeadTrimmedUnarchived counts, of those, the records a worker with a
	// hook for them (worker.Options.OnDeadTrimmed) could not be handed
	// because the records waiting for it had filled their buffer: they are
	// gone for good.
	DeadTrimmedUnarchived int64
	// Paused: the queue is paused (broker.Broker.Pause); its due jobs wait
	// and count in Due and Lateness.
	Paused bool
	// PausedTypes are the job types paused in the queue, sorted.
	PausedTypes []string
	// FairKeys: fair turns between keys are on in the queue
	// (broker.Broker.SetKeyFairness).
	FairKeys bool
	// RateLimits are the rate limits set on the queue
	// (broker.Broker.SetRateLimit): "" for the whole queue, else by type.
	RateLimits map[string]RateLimit
	// Caps are the concurrency caps set on the queue
	// (broker.Broker.SetConcurrency): "" for the whole queue, else by type;
	// each the whole cap, over all shards.
	Caps map[string]int
	// Parked counts due jobs of paused types, set aside until their type is
	// resumed (not in Scheduled).
	Parked int64
	// ParkedByType is Parked by type, each paused type with the jobs it
	// holds parked: the types holding none (paused or not) are left out
	// (nil when none holds any). Counted as jobs are parked and leave, so
	// reading it is O(paused types).
	ParkedByType map[string]int64
	// Held counts due jobs of capped types held aside until a job of their
	// type ends (not in Scheduled). Those of a type that also has a rate
	// limit count in HeldByRate instead.
	Held int64
	// HeldByCap is Held by type: the types holding none are left out (nil
	// when none holds any).
	HeldByCap map[string]int64
	// HeldByKey is the part of Held that per-key caps hold
	// (broker.Broker.SetKeyConcurrency), over all keys.
	HeldByKey int64
	// HeldByRate counts, by type, the due jobs held by the rate limit of
	// their type until its next tokens, earliest first. They are due and
	// waiting: counted in Scheduled and Due too, the oldest in OldestDue.
	HeldByRate map[string]int64
	OldestDue  time.Time // ready time of the longest-waiting due job (Now − OldestDue is its wait); zero when none
	NextReady  time.Time // earliest ready time in the future; zero when none
}

// RateLimit is a limit on how many jobs start per period across all
// workers: Count per Per, with Burst (0 means 1) allowed at once after a
// quiet spell. See broker.Broker.SetRateLimit.
//
// With Strict, the limit is a sliding window instead: never more than Count
// jobs claimed in any window of Per + Slack, across all workers and shards,
// with up to Count at once. Slack widens the window by how late a handler
// may start after its claim (see docs/flow-control.md), so that no window of
// Per holds more than Count handler starts.
type RateLimit struct {
	Count  int
	Per    time.Duration
	Burst  int
	Strict bool
	Slack  time.Duration
}

func (r RateLimit) String() string {
	if r.Strict {
		if r.Slack > 0 {
			return fmt.Sprintf("%d in any %s (+%s slack), strict", r.Count, r.Per, r.Slack)
		}
		return fmt.Sprintf("%d in any %s, strict", r.Count, r.Per)
	}
	return fmt.Sprintf("%d per %s, burst %d", r.Count, r.Per, max(r.Burst, 1))
}
