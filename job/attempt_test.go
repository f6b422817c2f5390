package job_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/job"
)

func TestAttemptOutsideAHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if err := job.SetResult(ctx, []byte("x")); !errors.Is(err, job.ErrNoAttempt) {
		t.Fatalf("SetResult: %v", err)
	}
	if err := job.ReportProgress(ctx, 0.5, ""); !errors.Is(err, job.ErrNoAttempt) {
		t.Fatalf("ReportProgress: %v", err)
	}
}

func TestAttemptKeepsResultAndProgress(t *testing.T) {
	t.Parallel()
	stored := time.UnixMilli(1_800_000_000_000)
	var reports []job.Progress
	ctx, a := job.WithAttempt(context.Background(), func(_ context.Context, p job.Progress) (time.Time, error) {
		reports = append(reports, p)
		return stored, nil
	})
	buf := []byte("first")
	if err := job.SetResult(ctx, buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'F' // the result was copied
	if r, ok := a.Result(); !ok || string(r) != "first" {
		t.Fatalf("result %q %v", r, ok)
	}
	if err := job.SetResult(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if r, ok := a.Result(); !ok || len(r) != 0 {
		t.Fatalf("a later SetResult replaces: %q %v", r, ok)
	}
	if err := job.ReportProgress(ctx, 0.75, "three quarters"); err != nil {
		t.Fatal(err)
	}
	if p := a.Progress(); p == nil || p.Fraction != 0.75 || p.Message != "three quarters" || !p.At.Equal(stored) || len(reports) != 1 {
		t.Fatalf("progress %+v, reports %v", p, reports)
	}
}

func TestAttemptBadInput(t *testing.T) {
	t.Parallel()
	failing := errors.New("lease lost")
	ctx, a := job.WithAttempt(context.Background(), func(context.Context, job.Progress) (time.Time, error) {
		return time.Time{}, failing
	})
	for _, c := range []struct {
		name string
		err  error
		is   error
		says string
	}{
		{"big result", job.SetResult(ctx, make([]byte, job.MaxResultSize+1)), job.ErrInvalid, "over the limit"},
		{"negative fraction", job.ReportProgress(ctx, -0.1, ""), job.ErrInvalid, "fraction -0.1"},
		{"fraction over 1", job.ReportProgress(ctx, 1.5, ""), job.ErrInvalid, "fraction 1.5"},
		{"NaN", job.ReportProgress(ctx, math.NaN(), ""), job.ErrInvalid, "fraction NaN"},
		{"long message", job.ReportProgress(ctx, 0.5, strings.Repeat("x", job.MaxProgressMessage+1)), job.ErrInvalid, "at most 200 bytes"},
		{"bad UTF-8", job.ReportProgress(ctx, 0.5, "\xff"), job.ErrInvalid, "UTF-8"},
		{"store fails", job.ReportProgress(ctx, 0.5, "ok"), failing, "report progress"},
	} {
		if !errors.Is(c.err, c.is) || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s: %v; want %v saying %q", c.name, c.err, c.is, c.says)
		}
	}
	if _, ok := a.Result(); ok {
		t.Fatal("a refused result was kept")
	}
	if a.Progress() != nil {
		t.Fatal("a refused progress was kept")
	}
	if _, err := job.New[int]("t").Envelope(1, job.Retain(-time.Second)); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "retention -1s is negative") {
		t.Fatalf("Retain(-1s): %v", err)
	}
	if err := job.Prepare(&job.Envelope{ID: "j", Type: "t", Retain: -time.Minute}, time.Now()); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "retention -1m0s") {
		t.Fatalf("Prepare with a negative retention: %v", err)
	}
	if _, err := job.ResultAs[int](&job.JobInfo{State: job.StateProcessing}); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("ResultAs of a running job: %v", err)
	}
}

func TestRetainRoundTrips(t *testing.T) {
	t.Parallel()
	env, err := job.New[int]("t", job.Retain(90*time.Second)).Envelope(1)
	if err != nil {
		t.Fatal(err)
	}
	body, err := env.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := job.Decode(body)
	if err != nil || back.Retain != 90*time.Second {
		t.Fatalf("decoded retain %v, %v (body %s)", back.Retain, err, body)
	}
	if _, err := job.Decode([]byte(`{"t":"t","rt":-5}`)); !errors.Is(err, job.ErrCorrupt) {
		t.Fatalf("a negative stored retention: %v", err)
	}
}
