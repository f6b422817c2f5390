package cli_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

// TestJobsSearchEveryQueue: without --queue, jobs ls lists every queue (by
// name, with a QUEUE column, paged across queues), and jobs show and dead
// show find the one queue that holds the id; an id in two queues is an
// error naming both, an unknown one an error naming how many queues were
// searched.
func TestJobsSearchEveryQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var want []string
	for _, q := range []string{"b", "a", "c"} {
		for i := range 3 {
			id := fmt.Sprintf("%s-%d", q, i)
			if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: id, Queue: q, Type: "t", Payload: []byte(`{}`), Delay: time.Duration(i+1) * time.Hour}); err != nil {
				t.Fatal(err)
			}
			want = append(want, q+"/"+id)
		}
	}
	for _, q := range []string{"a", "b"} {
		if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "twin", Queue: q, Type: "t", Payload: []byte(`{}`), Delay: 5 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		want = append(want, q+"/twin")
	}
	tb.killMany(t, "d", 1, "mail") // dead record job-0000 in queue d
	slices.Sort(want)

	type lsOut struct {
		Jobs []struct {
			ID    string `json:"id"`
			Queue string `json:"queue"`
		} `json:"jobs"`
		Next string `json:"next"`
	}
	// Pages of 2 run from queue to queue; together they list every job once,
	// queue by queue in name order.
	var got []string
	args := []string{"jobs", "ls", "--limit", "2"}
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatalf("more than 20 pages: %v", got)
		}
		var ls lsOut
		tb.okJSON(t, &ls, args...)
		for _, j := range ls.Jobs {
			got = append(got, j.Queue+"/"+j.ID)
		}
		if ls.Next == "" {
			break
		}
		args = []string{"jobs", "ls", "--limit", "2", "--cursor", ls.Next}
	}
	if !slices.IsSorted(got) || !slices.Equal(got, want) {
		t.Fatalf("jobs ls across queues, paged:\n got %v\nwant %v", got, want)
	}
	out := tb.ok(t, "jobs", "ls")
	if !strings.HasPrefix(out, "QUEUE") || !strings.Contains(out, "c-2") || !strings.Contains(out, "a-0") {
		t.Errorf("jobs ls table without --queue:\n%s", out)
	}
	if out := tb.ok(t, "jobs", "ls", "--queue", "c"); strings.Contains(out, "a-0") || strings.HasPrefix(out, "QUEUE") {
		t.Errorf("jobs ls --queue c:\n%s", out)
	}
	// A one-queue cursor is not an every-queue cursor.
	var one lsOut
	tb.okJSON(t, &one, "jobs", "ls", "--queue", "a", "--limit", "1")
	if r := tb.run(t, "jobs", "ls", "--cursor", one.Next); r.code != 2 || !strings.Contains(r.stderr, "invalid --cursor") {
		t.Errorf("a --queue cursor without --queue: exit %d, %q", r.code, r.stderr)
	}

	var show struct {
		ID    string `json:"id"`
		Queue string `json:"queue"`
	}
	tb.okJSON(t, &show, "jobs", "show", "c-1")
	if show.Queue != "c" || show.ID != "c-1" {
		t.Errorf("jobs show c-1 without --queue: %+v", show)
	}
	if out := tb.ok(t, "dead", "show", "job-0000"); !strings.Contains(out, "refused") {
		t.Errorf("dead show without --queue:\n%s", out)
	}
	for _, cmd := range [][]string{{"jobs", "show"}, {"dead", "show"}} {
		if r := tb.run(t, append(cmd, "nope")...); r.code != 1 || !strings.Contains(r.stderr, `job "nope" not found in any of the 4 queues`) {
			t.Errorf("%s of an unknown id: exit %d, %q", cmd, r.code, r.stderr)
		}
	}
	if r := tb.run(t, "jobs", "show", "twin"); r.code != 1 || !strings.Contains(r.stderr, `job id "twin" is in 2 queues (a, b): give --queue`) {
		t.Errorf("jobs show of an id in two queues: exit %d, %q", r.code, r.stderr)
	}
	// dead show looks at dead records only: the pending c-1 is not one.
	if r := tb.run(t, "dead", "show", "c-1"); r.code != 1 || !strings.Contains(r.stderr, "not found in any") {
		t.Errorf("dead show of a pending job: exit %d, %q", r.code, r.stderr)
	}
}

// TestEnqueueSaysWhichRetries: delayq enqueue cannot read the retry count a
// job type declares in code, so without --max-retries it says it used the
// default, and the job carries that; with it, the count given.
func TestEnqueueSaysWhichRetries(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	out := tb.ok(t, "enqueue", "--type", "sms.send", "--payload", "{}", "--id", "s1", "--queue", "sms")
	if !strings.Contains(out, fmt.Sprintf("%d retries (the default: the CLI does not know the type's own job.MaxRetries; give --max-retries)", naming.DefaultMaxRetries)) {
		t.Errorf("enqueue without --max-retries:\n%s", out)
	}
	out = tb.ok(t, "enqueue", "--type", "sms.send", "--payload", "{}", "--id", "s2", "--queue", "sms", "--max-retries", "3")
	if !strings.Contains(out, "3 retries\n") || strings.Contains(out, "default") {
		t.Errorf("enqueue --max-retries 3:\n%s", out)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(tb.ok(t, "enqueue", "--type", "sms.send", "--payload", "{}", "--id", "s3", "--queue", "sms", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res["max_retries"] != float64(naming.DefaultMaxRetries) || res["max_retries_default"] != true {
		t.Errorf("enqueue --json: %v", res)
	}
	for id, want := range map[string]int{"s1": naming.DefaultMaxRetries, "s2": 3, "s3": naming.DefaultMaxRetries} {
		j, err := tb.b.Job(tb.ctx, "sms", id)
		if err != nil || j.Envelope.MaxRetries != want {
			t.Errorf("stored %s: max retries %v, want %d (%v)", id, j, want, err)
		}
	}
	if help := tb.ok(t, "enqueue", "--help"); !strings.Contains(help, "not the count its type declares in code (job.MaxRetries)") {
		t.Errorf("enqueue --help does not say which retries it uses:\n%s", help)
	}
}
