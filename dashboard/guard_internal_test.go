package dashboard

import (
	"bytes"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/job"
)

func TestSplitHost(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"localhost":        "localhost|",
		"LocalHost:8080":   "localhost|8080",
		"127.0.0.1:1":      "127.0.0.1|1",
		"[::1]":            "::1|",
		"[::1]:65535":      "::1|65535",
		"ops.example.com.": "ops.example.com.|",
		"":                 "!",
		"::1":              "!",
		"[::1":             "!",
		"[::1]8080":        "!",
		"[nonsense]:80":    "!",
		"host:":            "!",
		"host:0":           "!",
		"host:080":         "!",
		"host:65536":       "!",
		"host:http":        "!",
		"a:1:2":            "!",
	} {
		h, p, ok := splitHost(in)
		got := h + "|" + p
		if !ok {
			got = "!"
		}
		if got != want {
			t.Errorf("splitHost(%q) = %q, want %q", in, got, want)
		}
	}
	for h, want := range map[string]bool{"localhost": true, "LOCALHOST": true, "127.0.0.1": true, "127.255.0.9": true, "::1": true,
		"localhost.": false, "localhost.evil.example": false, "128.0.0.1": false, "0.0.0.0": false, "::": false, "": false} {
		if got := isLoopback(h); got != want {
			t.Errorf("isLoopback(%q) = %v", h, got)
		}
	}
}

// A burst of events gives one line; the next line, a second later, counts
// what was held back.
func TestRateLimitedLog(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	l := rateLimited{now: func() time.Time { return now }}
	var lines []int
	step := func(d time.Duration) {
		now = now.Add(d)
		if n, ok := l.take(); ok {
			lines = append(lines, n)
		}
	}
	step(0) // a line: 1
	for range 9 {
		step(100 * time.Millisecond) // held back: 9, the last at +0.9s
	}
	step(100 * time.Millisecond) // +1.0s: a line counting 10
	step(999 * time.Millisecond) // held back
	step(5 * time.Second)        // a line counting 2
	if got := fmtInts(lines); got != "1,10,2" {
		t.Fatalf("lines counted %s, want 1,10,2", got)
	}

}

func fmtInts(v []int) string {
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// A signed notice expires; one signed by another secret never shows.
func TestNoticeExpires(t *testing.T) {
	t.Parallel()
	d := &Dashboard{secret: bytes.Repeat([]byte{1}, 32)}
	other := &Dashboard{secret: bytes.Repeat([]byte{2}, 32)}
	link := func(signer *Dashboard, age time.Duration) string {
		q := url.Values{"done": {"redriven"}, "nid": {"job-1"}}
		signer.signNotice(q)
		q.Set("t", strconv.FormatInt(time.Now().Add(-age).Unix(), 10))
		q.Set(noticeSig, signer.noticeMAC(q))
		return "/dead?" + q.Encode()
	}
	for name, c := range map[string]struct {
		link string
		want string
	}{
		"fresh":               {link(d, 0), `Job "job-1" sent back to its queue.`},
		"nine minutes":        {link(d, 9*time.Minute), `Job "job-1" sent back to its queue.`},
		"eleven minutes":      {link(d, 11*time.Minute), ""},
		"from the future":     {link(d, -5*time.Minute), ""},
		"another secret":      {link(other, 0), ""},
		"no signature at all": {"/dead?done=redriven&nid=job-1", ""},
	} {
		if got := d.flash(httptest.NewRequest("GET", c.link, nil)); got != c.want {
			t.Errorf("%s: flash %q, want %q", name, got, c.want)
		}
	}
}

// Every link and form that holds a queue name escapes it as one path
// segment, even a name that the queue-name check would refuse.
func TestQueueNamesPathEscaped(t *testing.T) {
	t.Parallel()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	const q = "a/b?c#d"
	const esc = "a%2Fb%3Fc%23d"
	env := &job.Envelope{ID: "x", Queue: q, Type: "t"}
	for name, data := range map[string]any{
		"overview": &overviewData{Queues: []queueRow{{QueueStats: job.QueueStats{Queue: q}}}},
		"queue": &queueData{Stats: job.QueueStats{Queue: q}, Paged: true,
			Scheduled:  broker.JobPage{Jobs: []*job.JobInfo{{ID: "x", Queue: q, State: job.StateScheduled, Envelope: env}}},
			Processing: broker.JobPage{Jobs: []*job.JobInfo{{ID: "y", Queue: q, State: job.StateProcessing, Envelope: env}}}},
		"job":     &job.JobInfo{ID: "x", Queue: q, State: job.StateScheduled, Envelope: env},
		"dead":    &deadData{Queues: []deadQueue{{Name: q, Dead: 1}}, Queue: q, Page: deadletter.Page{Records: []*job.DeadRecord{{ID: "x", Queue: q}}}},
		"deadall": &deadData{Queues: []deadQueue{{Name: q, Dead: 1}}, Page: deadletter.Page{Records: []*job.DeadRecord{{ID: "x", Queue: q}}}},
		"deadjob": &job.DeadRecord{ID: "x", Queue: q},
	} {
		page := name
		if name == "deadall" {
			page = "dead"
		}
		var buf bytes.Buffer
		v := &view{Title: "t", Nav: q, Data: data, CSRF: "tok"}
		if err := pages[page].ExecuteTemplate(&buf, "layout.html", v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := buf.String()
		for _, bad := range []string{"/queues/a/b", "/dead/a/b", "/queues/a%2fb", "/dead/a%2fb"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s: a path holds the queue name unescaped (%s):\n%s", name, bad, out)
			}
		}
		if !strings.Contains(out, "/queues/"+esc) && !strings.Contains(out, "/dead/"+esc) {
			t.Errorf("%s: no path with the escaped queue name:\n%s", name, out)
		}
	}
}
