package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

type report struct {
	Rows int    `json:"rows"`
	File string `json:"file"`
}

// A retained job reads back as succeeded, with its typed result, attempts,
// times and last progress, until its retention runs out; an id never
// enqueued is not found all along.
func TestRetainedJobReadsBackAsSucceededUntilItExpires(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const keep = 1500 * time.Millisecond
	typ := job.New[payload]("report.build", job.Retain(keep))
	job.HandleResult(typ, tb.reg, func(ctx context.Context, j *job.Job[payload]) (report, error) {
		if err := job.ReportProgress(ctx, 0.5, "half way"); err != nil {
			return report{}, err
		}
		if j.Attempt == 1 {
			return report{}, errors.New("first attempt fails")
		}
		if err := job.ReportProgress(ctx, 1, "done"); err != nil {
			return report{}, err
		}
		return report{Rows: j.Args.N, File: "r.csv"}, nil
	})
	cfg := tb.config(t)
	start(t, cfg)
	env, err := typ.Enqueue(tb.ctx, tb.b, payload{N: 42}, job.ID("r1"))
	if err != nil {
		t.Fatal(err)
	}
	var info *job.JobInfo
	redistest.WaitFor(t, 10*time.Second, "the job succeeded and is retained", func() bool {
		info, err = tb.b.Job(tb.ctx, env.Queue, "r1")
		return err == nil && info.State == job.StateSucceeded
	})
	got, err := job.ResultAs[report](info)
	if err != nil || got != (report{Rows: 42, File: "r.csv"}) {
		t.Fatalf("result %+v, %v", got, err)
	}
	if info.Attempts != 2 || info.Envelope == nil || info.Envelope.Type != "report.build" {
		t.Fatalf("attempts %d, envelope %+v; want 2 attempts of report.build", info.Attempts, info.Envelope)
	}
	if info.StartedAt.IsZero() || info.FinishedAt.Before(info.StartedAt) {
		t.Fatalf("started %v, finished %v", info.StartedAt, info.FinishedAt)
	}
	if left := info.ExpiresAt.Sub(info.Now); left <= 0 || left > keep {
		t.Fatalf("expires in %v, want within the retention of %v", left, keep)
	}
	if p := info.Progress; p == nil || p.Fraction != 1 || p.Message != "done" || p.At.IsZero() {
		t.Fatalf("progress kept %+v, want the last report", p)
	}
	if _, err := tb.b.Job(tb.ctx, env.Queue, "never"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("an id never enqueued: %v, want ErrNotFound", err)
	}
	// Only the retained record is left of the job: no progress report,
	// no lease, no envelope.
	tb.queueKeysEmpty(t, env.Queue)
	redistest.WaitFor(t, 10*time.Second, "the retention ran out", func() bool {
		_, err := tb.b.Job(tb.ctx, env.Queue, "r1")
		return errors.Is(err, broker.ErrNotFound)
	})
}

// Without retention, an acked job is deleted as before; a type's default
// retention applies to a job enqueued without a type (raw envelope), and a
// job's own retention wins over its type's.
func TestRetentionDefaultsAndNone(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ok := job.HandlerFunc(func(ctx context.Context, m *job.Message) error {
		return job.SetResult(ctx, []byte("raw bytes"))
	})
	if err := tb.reg.Table(registry.Key{}).Register("plain", registry.Entry[job.Handler, retry.Policy]{Handler: ok}); err != nil {
		t.Fatal(err)
	}
	if err := tb.reg.Table(registry.Key{}).Register("kept", registry.Entry[job.Handler, retry.Policy]{Handler: ok, Retain: time.Minute}); err != nil {
		t.Fatal(err)
	}
	start(t, tb.config(t))
	if err := tb.b.Enqueue(tb.ctx,
		&job.Envelope{ID: "p", Type: "plain"},
		&job.Envelope{ID: "k", Type: "kept"},
		&job.Envelope{ID: "own", Type: "plain", Retain: 30 * time.Second},
	); err != nil {
		t.Fatal(err)
	}
	var own *job.JobInfo
	redistest.WaitFor(t, 10*time.Second, "both retained jobs succeeded", func() bool {
		k, err1 := tb.b.Job(tb.ctx, naming.DefaultQueue, "k")
		o, err2 := tb.b.Job(tb.ctx, naming.DefaultQueue, "own")
		own = o
		return err1 == nil && err2 == nil && k.State == job.StateSucceeded && o.State == job.StateSucceeded
	})
	if string(own.Result) != "raw bytes" {
		t.Fatalf("result %q", own.Result)
	}
	if left := own.ExpiresAt.Sub(own.Now); left <= 20*time.Second || left > 30*time.Second {
		t.Fatalf("the job's own retention of 30s: expires in %v", left)
	}
	if _, err := tb.b.Job(tb.ctx, naming.DefaultQueue, "p"); !errors.Is(err, broker.ErrNotFound) {
		t.Fatalf("a job without retention after its ack: %v, want ErrNotFound", err)
	}
}

// While a job runs, Broker.Job shows its last progress; once it ends, the
// report is gone with the lease.
func TestProgressVisibleWhileRunning(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[payload]("slow")
	release := make(chan struct{})
	reported := make(chan error, 1)
	typ.Handle(tb.reg, func(ctx context.Context, j *job.Job[payload]) error {
		reported <- job.ReportProgress(ctx, 0.25, "step 1 of 4")
		<-release
		return nil
	})
	start(t, tb.config(t))
	env, err := typ.Enqueue(tb.ctx, tb.b, payload{}, job.ID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-reported; err != nil {
		t.Fatal(err)
	}
	info, err := tb.b.Job(tb.ctx, env.Queue, "s1")
	if err != nil || info.State != job.StateProcessing {
		t.Fatalf("%+v, %v", info, err)
	}
	if p := info.Progress; p == nil || p.Fraction != 0.25 || p.Message != "step 1 of 4" || p.At.After(info.Now) {
		t.Fatalf("progress %+v", p)
	}
	close(release)
	redistest.WaitFor(t, 5*time.Second, "the job ended", func() bool {
		_, err := tb.b.Job(tb.ctx, env.Queue, "s1")
		return errors.Is(err, broker.ErrNotFound)
	})
	tb.queueKeysEmpty(t, env.Queue)
}
