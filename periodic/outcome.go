package periodic

import (
	"context"
	"encoding/json"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// outcomeTimeout bounds the write of one outcome.
const outcomeTimeout = 5 * time.Second

// Outcomes returns worker middleware that records, for every job a
// Scheduler enqueued for a tick, how its attempt ended: success, retry or
// dead, with the error. [List] shows the latest as the schedule's last
// outcome. Other jobs pass through untouched.
//
// A job counts as a tick's only when its id is the tick's (name@T, of
// its headers delayq-periodic and delayq-periodic-tick) and its header
// delayq-periodic-sig holds for its id and queue: schedulers sign their ticks' jobs with a key that only
// they write (see docs/periodic.md). So a job that merely carries the
// headers, which anyone who can enqueue can set, records nothing; nor
// does a copy of a tick's headers on another job or queue. An outcome
// never replaces the stored outcome of a later tick.
//
// Under a worker the outcome is the one the worker settled (job.OnResult),
// written after the handler returned without holding up the worker; an
// attempt whose lease was lost or that was released at shutdown records
// nothing (the job runs again). Called outside a worker, it records
// "success" or "failed" from the handler's error before returning.
func Outcomes(b *broker.Broker) job.Middleware {
	rdb, keys := b.Client(), keyspace.Periodic(b.Namespace())
	v := &verifier{rdb: rdb, key: keys.Secret}
	write := func(ctx context.Context, name string, o outcome) {
		body, err := json.Marshal(o)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeTimeout)
		defer cancel()
		// A lost write costs only what the operator sees; the job is
		// done. The check of the stored tick and the write are two
		// commands: of two outcomes written at the same moment, the
		// earlier tick's may win until the next outcome.
		if raw, err := rdb.HGet(ctx, keys.Outcomes, name).Result(); err == nil {
			var prev outcome
			if json.Unmarshal([]byte(raw), &prev) == nil && prev.Tick > o.Tick {
				return
			}
		}
		_ = rdb.HSet(ctx, keys.Outcomes, name, body).Err()
	}
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			if m.Headers[headerSchedule] == "" {
				return next.Handle(ctx, m)
			}
			name, tick, ok := v.tick(ctx, m)
			if !ok {
				return next.Handle(ctx, m)
			}
			o := outcome{Attempt: m.Attempt, Tick: tick.UnixMilli()}
			start := time.Now()
			ended := func() int64 {
				if m.ClaimedAt.IsZero() {
					return time.Now().UnixMilli()
				}
				return m.ClaimedAt.Add(time.Since(start)).UnixMilli() // on the server's clock
			}
			settled := job.OnResult(ctx, func(res job.Result) {
				switch res.Outcome {
				case job.OutcomeSuccess:
					o.Result = ResultSuccess
				case job.OutcomeRetry:
					o.Result = ResultRetry
				case job.OutcomeDead:
					o.Result = ResultDead
				default:
					return // lease lost or released: it runs again
				}
				if res.Err != nil {
					o.Error = truncate(res.Err.Error(), 512)
				}
				o.At = ended()
				go write(ctx, name, o)
			})
			err := next.Handle(ctx, m)
			if !settled {
				o.Result, o.At = ResultSuccess, ended()
				if err != nil {
					o.Result, o.Error = ResultFailed, truncate(err.Error(), 512)
				}
				write(ctx, name, o)
			}
			return err
		})
	}
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cut(s, n) + "…"
}

// cut returns the first n bytes of s, or fewer, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
