package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

type resizeArgs struct {
	Binary bool `json:"binary"`
}

// TestJobsShowSucceededAndProgress: a real worker runs a retained job whose
// handler reports progress and sets a result. While it runs, jobs show
// prints its progress; once it succeeded, its state, result (text, or
// base64 with the length when not UTF-8), attempts and timings.
func TestJobsShowSucceededAndProgress(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[resizeArgs]("image.resize", job.Queue("img"), job.Retain(time.Hour), job.MaxRetries(0))
	reg := job.NewRegistry()
	release := make(chan struct{})
	typ.Handle(reg, func(ctx context.Context, j *job.Job[resizeArgs]) error {
		if j.Args.Binary {
			return job.SetResult(ctx, []byte{0xff, 0x00, 0x01})
		}
		if err := job.ReportProgress(ctx, 0.425, "resizing 17 of 40"); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := job.ReportProgress(ctx, 1, "done"); err != nil {
			return err
		}
		return job.SetResult(ctx, []byte(`{"width":640}`))
	})
	e, err := typ.Envelope(resizeArgs{}, job.ID("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.b.Enqueue(tb.ctx, e); err != nil {
		t.Fatal(err)
	}
	runWorker(t, tb, reg, "img")
	redistest.WaitFor(t, 30*time.Second, "r1 reports progress", func() bool {
		j, err := tb.b.Job(tb.ctx, "img", "r1")
		return err == nil && j.State == job.StateProcessing && j.Progress != nil
	})
	out := tb.ok(t, "jobs", "show", "r1", "--queue", "img")
	for _, row := range [][2]string{{"State:", "processing"}, {"Progress:", "42.5% resizing 17 of 40 ("}} {
		if !hasRow(out, row[0], row[1]) {
			t.Errorf("jobs show of the running job lacks %q %q:\n%s", row[0], row[1], out)
		}
	}
	var running struct {
		State    string `json:"state"`
		Progress *struct {
			Fraction float64 `json:"fraction"`
			Message  string  `json:"message"`
			At       string  `json:"at"`
		} `json:"progress"`
	}
	tb.okJSON(t, &running, "jobs", "show", "r1", "--queue", "img")
	if running.State != "processing" || running.Progress == nil || running.Progress.Fraction != 0.425 ||
		running.Progress.Message != "resizing 17 of 40" || running.Progress.At == "" {
		t.Errorf("jobs show --json of the running job: %+v", running)
	}
	close(release)

	b, err := typ.Envelope(resizeArgs{Binary: true}, job.ID("r2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.b.Enqueue(tb.ctx, b); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r1", "r2"} {
		redistest.WaitFor(t, 30*time.Second, id+" succeeded", func() bool {
			j, err := tb.b.Job(tb.ctx, "img", id)
			return err == nil && j.State == job.StateSucceeded
		})
	}
	out = tb.ok(t, "jobs", "show", "r1", "--queue", "img")
	for _, row := range [][2]string{{"State:", "succeeded"}, {"Attempts:", "1 of 1"}, {"Started:", "20"}, {"Finished:", "20"},
		{"Expires:", "20"}, {"Result:", `{"width":640}`}, {"Progress:", "100% done ("}} {
		if !hasRow(out, row[0], row[1]) {
			t.Errorf("jobs show of the succeeded job lacks %q %q:\n%s", row[0], row[1], out)
		}
	}
	// Retained for an hour from its end: "in 1h" when shown at once, less
	// by the time r2 took to run before the show (seconds under load).
	if !strings.Contains(out, ", took ") || !regexpLine(out, `^Expires: .*\(in (1h|59m[0-9]{1,2}s)\)$`) {
		t.Errorf("jobs show of the succeeded job lacks how long it took or when it expires:\n%s", out)
	}
	type doneOut struct {
		State        string  `json:"state"`
		Attempts     int     `json:"attempts"`
		Result       *string `json:"result"`
		ResultBase64 string  `json:"result_base64"`
		ResultBytes  *int    `json:"result_bytes"`
		StartedAt    string  `json:"started_at"`
		FinishedAt   string  `json:"finished_at"`
		ExpiresAt    string  `json:"expires_at"`
	}
	var done doneOut
	tb.okJSON(t, &done, "jobs", "show", "r1", "--queue", "img")
	started, err1 := time.Parse(time.RFC3339Nano, done.StartedAt)
	finished, err2 := time.Parse(time.RFC3339Nano, done.FinishedAt)
	expires, err3 := time.Parse(time.RFC3339Nano, done.ExpiresAt)
	if done.State != "succeeded" || done.Attempts != 1 || done.Result == nil || *done.Result != `{"width":640}` || done.ResultBase64 != "" ||
		done.ResultBytes == nil || *done.ResultBytes != 13 || err1 != nil || err2 != nil || err3 != nil ||
		finished.Before(started) || expires.Sub(finished) < 59*time.Minute || expires.Sub(finished) > 61*time.Minute {
		got, _ := json.Marshal(done)
		t.Errorf("jobs show --json of the succeeded job: %s", got)
	}

	out = tb.ok(t, "jobs", "show", "r2", "--queue", "img")
	if !hasRow(out, "Result:", "3 bytes, not UTF-8: base64:/wAB") {
		t.Errorf("jobs show of a binary result:\n%s", out)
	}
	var bin doneOut
	tb.okJSON(t, &bin, "jobs", "show", "r2", "--queue", "img")
	if bin.Result != nil || bin.ResultBase64 != "/wAB" || bin.ResultBytes == nil || *bin.ResultBytes != 3 {
		t.Errorf("jobs show --json of a binary result: %+v", bin)
	}
}

// hasRow reports whether the "Label: value" output has a line with label
// whose value starts with value.
func hasRow(out, label, value string) bool {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, label); ok && strings.HasPrefix(strings.TrimLeft(rest, " "), value) {
			return true
		}
	}
	return false
}

// jobs show lists the jobs a job's success enqueues (job.Then), in the
// table and in JSON.
func TestJobsShowNextJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	typ := job.New[resizeArgs]("image.resize", job.Queue("img"))
	thumb := job.New[resizeArgs]("image.thumb", job.Queue("thumbs"))
	last, err := thumb.Envelope(resizeArgs{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := thumb.Envelope(resizeArgs{}, job.In(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	second, err := thumb.Envelope(resizeArgs{}, job.ID("t-2"), job.Then(last))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, resizeArgs{}, job.ID("r1"), job.In(time.Hour), job.Then(first, second)); err != nil {
		t.Fatal(err)
	}
	out := tb.ok(t, "jobs", "show", "r1", "--queue", "img")
	if !hasRow(out, "Then:", "image.thumb (id from this job's) in queue thumbs, 1m") ||
		!strings.Contains(out, "image.thumb t-2 in queue thumbs, then 1 more") {
		t.Errorf("jobs show lacks the next jobs:\n%s", out)
	}
	var got struct {
		Next []struct {
			Type    string `json:"type"`
			Queue   string `json:"queue"`
			ID      string `json:"id"`
			DelayMS int64  `json:"delay_ms"`
			Then    int    `json:"then"`
		} `json:"next"`
	}
	tb.okJSON(t, &got, "jobs", "show", "r1", "--queue", "img")
	if len(got.Next) != 2 || got.Next[0].DelayMS != 60_000 || got.Next[0].ID != "" || got.Next[1].ID != "t-2" || got.Next[1].Then != 1 || got.Next[1].Queue != "thumbs" {
		t.Errorf("jobs show --json next: %+v", got.Next)
	}
}
