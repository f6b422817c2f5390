package middleware_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/delayq/delayq/internal/attempt"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

// Tracing and Metrics reuse what they keep of an attempt once it settled.
// These tests settle many attempts, concurrently and out of order, each
// with its own message and result, and check that every span and every
// measurement got its own attempt's values and nothing of another's.

// settledAttempt is one attempt run through a handler under a result
// collector, settled later.
type settledAttempt struct {
	m      *job.Message
	res    job.Result
	settle func(job.Result)
}

func startAttempts(t *testing.T, h job.Handler, n int) []settledAttempt {
	t.Helper()
	out := make([]settledAttempt, n)
	var wg sync.WaitGroup
	for i := range n {
		// Successes, retries, dead letters (permanent errors) and lost
		// leases, in queues q0..q2, types t0..t3.
		m := &job.Message{
			Envelope: job.Envelope{ID: "id" + strconv.Itoa(i), Queue: "q" + strconv.Itoa(i%3), Type: "t" + strconv.Itoa(i%4), MaxRetries: 5},
			Attempt:  i%5 + 1,
		}
		var res job.Result
		switch i % 4 {
		case 0:
			res = job.Result{Outcome: job.OutcomeSuccess}
		case 1:
			res = job.Result{Outcome: job.OutcomeRetry, Err: fmt.Errorf("fail %d", i), Delay: time.Duration(i) * time.Millisecond}
		case 2:
			res = job.Result{Outcome: job.OutcomeDead, Err: retry.Permanent(fmt.Errorf("bad %d", i))}
		case 3:
			res = job.Result{Outcome: job.OutcomeLeaseLost, Lost: fmt.Errorf("lost %d", i)}
		}
		out[i] = settledAttempt{m: m, res: res}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, a := attempt.With[job.Envelope, job.Result, job.Progress](context.Background(), nil)
			settle := a.Settle
			out[i].settle = settle
			_ = h.Handle(ctx, m)
		}()
	}
	wg.Wait()
	return out
}

// settleAll settles the attempts in reverse order, from several goroutines.
func settleAll(as []settledAttempt) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := len(as) - 1 - g; i >= 0; i -= 4 {
				as[i].settle(as[i].res)
			}
		}()
	}
	wg.Wait()
}

func TestTracingAttemptsKeepTheirOwnValues(t *testing.T) {
	t.Parallel()
	sr, tp := newTracing(t)
	nop := job.HandlerFunc(func(ctx context.Context, m *job.Message) error { return nil })
	h := middleware.Tracing(middleware.WithTracerProvider(tp))(nop)
	// Two rounds: the second reuses what the first released.
	for round := range 2 {
		as := startAttempts(t, h, 200)
		settleAll(as)
		byID := map[string]settledAttempt{}
		for _, a := range as {
			byID[a.m.ID] = a
		}
		spans := sr.Ended()[round*len(as):]
		if len(spans) != len(as) {
			t.Fatalf("round %d: %d spans, want %d", round, len(spans), len(as))
		}
		for _, s := range spans {
			a := attrs(s)
			at, ok := byID[a["messaging.message.id"].AsString()]
			if !ok {
				t.Fatalf("span with message id %q", a["messaging.message.id"].AsString())
			}
			m, res := at.m, at.res
			if s.Name() != "process "+m.Queue || a["messaging.destination.name"].AsString() != m.Queue ||
				a["delayq.job.type"].AsString() != m.Type || a["delayq.job.attempt"].AsInt64() != int64(m.Attempt) ||
				a["delayq.job.outcome"].AsString() != res.Outcome.String() || a["messaging.system"].AsString() != "delayq" {
				t.Fatalf("span %q of %s: attributes %v", s.Name(), m.ID, a)
			}
			_, hasErrType := a["error.type"]
			_, hasDelay := a["delayq.retry.delay_ms"]
			_, hasLost := a["delayq.lease.lost_reason"]
			_, hasPermanent := a["delayq.error.permanent"]
			if hasErrType != (res.Err != nil) || hasDelay != (res.Outcome == job.OutcomeRetry) ||
				hasLost != (res.Outcome == job.OutcomeLeaseLost) || hasPermanent != (res.Outcome == job.OutcomeDead) {
				t.Fatalf("span of %s (%s): attributes %v", m.ID, res.Outcome, a)
			}
			if hasDelay && a["delayq.retry.delay_ms"].AsInt64() != res.Delay.Milliseconds() {
				t.Fatalf("span of %s: delay %v, want %v", m.ID, a["delayq.retry.delay_ms"], res.Delay)
			}
			if hasLost && a["delayq.lease.lost_reason"].AsString() != res.Lost.Error() {
				t.Fatalf("span of %s: lost reason %v, want %v", m.ID, a["delayq.lease.lost_reason"], res.Lost)
			}
			wantErr := res.Err != nil || res.Outcome == job.OutcomeLeaseLost
			if (s.Status().Code == codes.Error) != wantErr || hasEvent(s, "exception") != (res.Err != nil) ||
				hasEvent(s, middleware.EventDeadLettered) != (res.Outcome == job.OutcomeDead) {
				t.Fatalf("span of %s (%s): status %v events %v", m.ID, res.Outcome, s.Status(), s.Events())
			}
			if res.Err != nil && s.Status().Description != res.Err.Error() {
				t.Fatalf("span of %s: status %q, want the error's message %q", m.ID, s.Status().Description, res.Err)
			}
			if s.EndTime().Before(s.StartTime()) {
				t.Fatalf("span of %s ends %v before it starts %v", m.ID, s.EndTime(), s.StartTime())
			}
		}
	}
}

func TestMetricsAttemptsKeepTheirOwnLabels(t *testing.T) {
	t.Parallel()
	mtr := newMeter(t)
	nop := job.HandlerFunc(func(ctx context.Context, m *job.Message) error { return nil })
	h := middleware.Metrics(middleware.WithMeterProvider(mtr.mp))(nop)
	want := map[[3]string]int64{}
	for range 2 {
		as := startAttempts(t, h, 240)
		settleAll(as)
		for _, a := range as {
			want[[3]string{a.m.Queue, a.m.Type, a.res.Outcome.String()}]++
		}
	}
	// An outcome the cache holds no options for is labelled all the same.
	ctx, a := attempt.With[job.Envelope, job.Result, job.Progress](context.Background(), nil)
	settle := a.Settle
	_ = h.Handle(ctx, &job.Message{Envelope: job.Envelope{ID: "x", Queue: "q0", Type: "t0"}, Attempt: 1})
	settle(job.Result{Outcome: job.Outcome(200)})
	want[[3]string{"q0", "t0", "unknown"}]++

	data := mtr.collect()
	var total int64
	for k, n := range want {
		labels := map[string]string{"queue": k[0], "type": k[1], "outcome": k[2]}
		if got := sum(data, middleware.MetricHandled, labels); got != n {
			t.Errorf("%s%v = %d, want %d", middleware.MetricHandled, labels, got, n)
		}
		total += n
	}
	if got := sum(data, middleware.MetricHandled, nil); got != total {
		t.Errorf("%s = %d in all, want %d", middleware.MetricHandled, got, total)
	}
	if got := observations(data, middleware.MetricDuration); got != uint64(total) {
		t.Errorf("%s has %d observations, want %d", middleware.MetricDuration, got, total)
	}
	if got := observations(data, middleware.MetricLateness); got != uint64(total) {
		t.Errorf("%s has %d observations, want %d", middleware.MetricLateness, got, total)
	}
}
