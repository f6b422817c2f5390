package dashboard_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

type resizeArgs struct {
	Binary bool `json:"binary"`
}

// The job page of a running job shows its progress and refreshes itself;
// once the job succeeded (retained), its state, timings and result: text
// (JSON indented), or the length and base64 of bytes that are not UTF-8.
func TestJobPageProgressAndResult(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	typ := job.New[resizeArgs]("image.resize", job.Queue("img"), job.Retain(time.Hour), job.MaxRetries(0))
	reg := job.NewRegistry()
	release := make(chan struct{})
	typ.Handle(reg, func(ctx context.Context, j *job.Job[resizeArgs]) error {
		if j.Args.Binary {
			return job.SetResult(ctx, []byte{0xff, 0x00, 0x01})
		}
		if err := job.ReportProgress(ctx, 0.425, "resizing <17> of 40"); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return job.SetResult(ctx, []byte(`{"width":640}`))
	})
	for _, a := range []struct {
		id  string
		bin bool
	}{{"r1", false}, {"r2", true}} {
		e, err := typ.Envelope(resizeArgs{Binary: a.bin}, job.ID(a.id))
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.b.Enqueue(tb.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	tb.runWorker(t, reg, "img")
	redistest.WaitFor(t, 30*time.Second, "r1 reports progress", func() bool {
		j, err := tb.b.Job(tb.ctx, "img", "r1")
		return err == nil && j.State == job.StateProcessing && j.Progress != nil
	})
	r := tb.get(t, "/queues/img/job?id=r1")
	wantStatus(t, "running job page", r, http.StatusOK)
	mustContain(t, "running job page", r.body, `<span class="state s-processing">processing</span>`, `data-refresh="5"`,
		`<dt>Progress</dt><dd id="progress"><progress max="1" value="0.425">42.5%</progress> 42.5% <bdi>resizing &lt;17&gt; of 40</bdi>`)
	mustNotContain(t, "running job page", r.body, `id="result"`)
	close(release)

	for _, id := range []string{"r1", "r2"} {
		redistest.WaitFor(t, 30*time.Second, id+" succeeded", func() bool {
			j, err := tb.b.Job(tb.ctx, "img", id)
			return err == nil && j.State == job.StateSucceeded
		})
	}
	r = tb.get(t, "/queues/img/job?id=r1")
	wantStatus(t, "succeeded job page", r, http.StatusOK)
	mustContain(t, "succeeded job page", r.body, `<span class="state s-succeeded">succeeded</span>`,
		"<dt>Attempts</dt><dd>1 of 1 allowed</dd>", "<dt>Started</dt><dd>", "<dt>Finished</dt><dd>", ", took ", "<dt>Expires</dt><dd>", "(in 59m",
		"<h2>Result</h2>", "<pre class=\"payload\" id=\"result\" dir=\"auto\">{\n  &#34;width&#34;: 640\n}</pre>")
	mustNotContain(t, "succeeded job page", r.body, `data-refresh="5"`, `method="post"`)
	r = tb.get(t, "/queues/img/job?id=r2")
	wantStatus(t, "binary result page", r, http.StatusOK)
	mustContain(t, "binary result page", r.body, "<pre class=\"payload\" id=\"result\" dir=\"auto\">(3 bytes, not UTF-8; base64)\n/wAB</pre>")
}

// The job page lists the jobs a job's success enqueues (job.Then), each
// with its type, queue and when, and a link when it has an id of its own.
func TestJobPageNextJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	typ := job.New[resizeArgs]("image.resize", job.Queue("img"))
	thumb := job.New[resizeArgs]("image.thumb", job.Queue("thumbs"))
	first, err := thumb.Envelope(resizeArgs{}, job.In(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	second, err := thumb.Envelope(resizeArgs{}, job.ID("t<2>"), job.Then(first))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := typ.Enqueue(tb.ctx, tb.b, resizeArgs{}, job.ID("r1"), job.In(time.Hour), job.Then(first, second)); err != nil {
		t.Fatal(err)
	}
	r := tb.get(t, "/queues/img/job?id=r1")
	wantStatus(t, "job page", r, http.StatusOK)
	mustContain(t, "job page", r.body,
		`<dt>Then</dt><dd class="next"><bdi>image.thumb</bdi> (id from this job's) in queue <bdi>thumbs</bdi>, 1m00s after this job succeeds</dd>`,
		`<dt>Then (2)</dt><dd class="next"><bdi>image.thumb</bdi> <a href="/queues/thumbs/job?id=t%3c2%3e"><code class="id"><bdi>t&lt;2&gt;</bdi></code></a> in queue <bdi>thumbs</bdi>, then 1 more</dd>`)
}
