package middleware

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// Logging is handler middleware that writes one line per settled attempt to
// logger, with the fields job_id, type, queue, attempt, outcome, duration_ms
// (the handler's time), lateness_ms (claim time − ready time) and, when the
// attempt failed, error; delay_ms for a retry, lost for a lost lease, and
// trace_id and span_id when the handler's context carries a span (put
// [Tracing] before Logging to get them).
//
// Levels: success and released at info, retry and lease_lost at warn, dead
// at error. A logger whose level is zerolog.Disabled (zerolog.Nop()) makes
// Logging return the handler unchanged.
func Logging(logger zerolog.Logger) job.Middleware {
	if logger.GetLevel() == zerolog.Disabled {
		return func(next job.Handler) job.Handler { return next }
	}
	return func(next job.Handler) job.Handler {
		return job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
			start := time.Now()
			sc := trace.SpanContextFromContext(ctx)
			return observe(ctx, m, next, func(res job.Result, end time.Time) {
				logResult(logger, m, sc, res, end.Sub(start))
			})
		})
	}
}

func logResult(logger zerolog.Logger, m *job.Message, sc trace.SpanContext, res job.Result, d time.Duration) {
	var e *zerolog.Event
	var msg string
	switch res.Outcome {
	case job.OutcomeSuccess:
		e, msg = logger.Info(), "job succeeded"
	case job.OutcomeRetry:
		e, msg = logger.Warn(), "job failed; retrying"
	case job.OutcomeDead:
		e, msg = logger.Error(), "job dead-lettered"
	case job.OutcomeLeaseLost:
		e, msg = logger.Warn(), "job outcome not recorded: lease lost; the job was or will be handled again"
	case job.OutcomeReleased:
		e, msg = logger.Info(), "job released unfinished at shutdown"
	default:
		e, msg = logger.Warn(), "job handled; outcome unknown"
	}
	if e == nil {
		return // level filtered out
	}
	q := m.Queue
	if q == "" {
		q = naming.DefaultQueue
	}
	e = e.Str("job_id", m.ID).
		Str("type", m.Type).
		Str("queue", q).
		Int("attempt", m.Attempt).
		Str("outcome", res.Outcome.String()).
		Float64("duration_ms", ms(d)).
		Float64("lateness_ms", ms(max(m.Lateness(), 0)))
	if res.Err != nil {
		e = e.Str("error", res.Err.Error())
	}
	if res.Outcome == job.OutcomeRetry {
		e = e.Float64("delay_ms", ms(res.Delay))
	}
	if res.Lost != nil {
		e = e.Str("lost", res.Lost.Error())
	}
	if sc.IsValid() {
		e = e.Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String())
	}
	e.Msg(msg)
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
