package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
)

// lines parses the JSON log lines written to buf.
func lines(t *testing.T, buf *lockedBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLoggingOneLinePerOutcome(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	_, tp := newTracing(t)
	buf := &lockedBuffer{}
	typ := job.New[payload]("logged", job.MaxRetries(1))
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		if j.ID == "bad" {
			return errors.New("smtp: 550 mailbox unavailable")
		}
		return nil
	})
	for _, id := range []string{"good", "bad"} {
		if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID(id), fast); err != nil {
			t.Fatal(err)
		}
	}
	run(t, tb.config(t), middleware.Tracing(middleware.WithTracerProvider(tp)), middleware.Logging(zerolog.New(buf)))
	redistest.WaitFor(t, 10*time.Second, "three log lines", func() bool { return strings.Count(buf.String(), "\n") >= 3 })

	byOutcome := map[string]map[string]any{}
	got := lines(t, buf)
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3 (success, retry, dead):\n%s", len(got), buf.String())
	}
	for _, l := range got {
		byOutcome[l["outcome"].(string)] = l
		for _, f := range []string{"job_id", "type", "queue", "attempt", "duration_ms", "lateness_ms", "trace_id", "span_id", "message", "level"} {
			if _, ok := l[f]; !ok {
				t.Errorf("line %v lacks %s", l, f)
			}
		}
		if l["type"] != "logged" || l["queue"] != "default" {
			t.Errorf("line %v: wrong type or queue", l)
		}
		if d, _ := l["duration_ms"].(float64); d < 0 {
			t.Errorf("line %v: negative duration", l)
		}
	}
	for outcome, want := range map[string]struct {
		id, level string
		attempt   float64
		err       bool
	}{
		"success": {"good", "info", 1, false},
		"retry":   {"bad", "warn", 1, true},
		"dead":    {"bad", "error", 2, true},
	} {
		l, ok := byOutcome[outcome]
		if !ok {
			t.Errorf("no %s line", outcome)
			continue
		}
		if l["job_id"] != want.id || l["level"] != want.level || l["attempt"] != want.attempt {
			t.Errorf("%s line %v: want job_id %s, level %s, attempt %v", outcome, l, want.id, want.level, want.attempt)
		}
		if _, has := l["error"]; has != want.err {
			t.Errorf("%s line %v: error field present %v, want %v", outcome, l, has, want.err)
		}
	}
	if e, _ := byOutcome["dead"]["error"].(string); e != "smtp: 550 mailbox unavailable" {
		t.Errorf("dead line error %q", e)
	}
	if _, ok := byOutcome["retry"]["delay_ms"]; !ok {
		t.Error("retry line lacks delay_ms")
	}
}

func TestLoggingDisabledWritesNothing(t *testing.T) {
	t.Parallel()
	// A disabled logger leaves the handler as it is.
	h := &countingHandler{}
	if got := middleware.Logging(zerolog.Nop())(h); got != job.Handler(h) {
		t.Fatal("Logging(zerolog.Nop()) wrapped the handler")
	}

	tb := setup(t)
	buf := &lockedBuffer{}
	typ := job.New[payload]("quiet", job.MaxRetries(0))
	var handled atomic.Int32
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		handled.Add(1)
		if j.Args.N == 1 {
			return errors.New("fails")
		}
		return nil
	})
	if _, err := typ.EnqueueItems(tb.ctx, tb.b, testkit.Items([]payload{{N: 0}, {N: 1}})); err != nil {
		t.Fatal(err)
	}
	cfg := tb.config(t)
	cfg.Logger = nil // the default: zerolog.Nop()
	stop := run(t, cfg, middleware.Logging(zerolog.New(buf).Level(zerolog.Disabled)))
	redistest.WaitFor(t, 10*time.Second, "both jobs settled", func() bool {
		n, _ := tb.rdb.HLen(tb.ctx, tb.key("default", "jobs")).Result()
		return handled.Load() == 2 && n == 0
	})
	stop()
	if buf.String() != "" {
		t.Fatalf("a disabled logger wrote:\n%s", buf.String())
	}
}

type countingHandler struct{ n atomic.Int32 }

func (h *countingHandler) Handle(context.Context, *job.Message) error { h.n.Add(1); return nil }

// TestLeaseLostObserved takes a running job's lease away: the ack is
// refused, and tracing, metrics and logging all report lease_lost.
func TestLeaseLostObserved(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	sr, tp := newTracing(t)
	m := newMeter(t)
	buf := &lockedBuffer{}
	typ := job.New[payload]("stolen")
	running, finish := make(chan struct{}), make(chan struct{})
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		close(running)
		<-finish
		return nil
	})
	if _, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID("s1")); err != nil {
		t.Fatal(err)
	}
	run(t, tb.config(t),
		middleware.Tracing(middleware.WithTracerProvider(tp)),
		middleware.Metrics(middleware.WithMeterProvider(m.mp)),
		middleware.Logging(zerolog.New(buf)))
	<-running
	// What a reaper's redelivery does: the fencing token changes.
	if err := tb.rdb.HSet(tb.ctx, tb.key("default", "leases"), "s1", "another-worker").Err(); err != nil {
		t.Fatal(err)
	}
	close(finish)
	redistest.WaitFor(t, 10*time.Second, "span, metric and log line", func() bool {
		return len(spansNamed(sr, "process default")) == 1 && strings.Contains(buf.String(), "\n") &&
			sum(m.collect(), middleware.MetricHandled, map[string]string{"outcome": "lease_lost"}) == 1
	})
	s := spansNamed(sr, "process default")[0]
	if a := attrs(s); a["delayq.job.outcome"].AsString() != "lease_lost" || s.Status().Code != codes.Error || a["delayq.lease.lost_reason"].AsString() == "" {
		t.Errorf("span outcome %q status %v reason %q", a["delayq.job.outcome"].AsString(), s.Status(), a["delayq.lease.lost_reason"].AsString())
	}
	l := lines(t, buf)
	if lost, _ := l[0]["lost"].(string); len(l) != 1 || l[0]["outcome"] != "lease_lost" || l[0]["level"] != "warn" || !strings.Contains(lost, "lease lost") {
		t.Errorf("log lines %v, want one warn lease_lost line naming the lost lease", l)
	}
}
