package shardtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
)

// A case asks one side one question and returns the answer: any value that
// encodes to JSON, a cliOut or a webPage.
type question func(t *testing.T, e *env) any

// same asks both sides of p the question in mode m and fails the test,
// printing both answers, unless they are equal once normalised. It returns
// the raw answers, 1 shard first. On the server's clock a difference is
// asked again twice before it counts: two reads of a clock that runs can
// straddle a second or a minute that shows in the answer.
func same(t *testing.T, p *pair, m mode, ask question) [2]any {
	t.Helper()
	raw, _ := compare(t, p, m, ask)
	return raw
}

// compare is same, and also returns the normalised answers.
func compare(t *testing.T, p *pair, m mode, ask question) ([2]any, [2]string) {
	t.Helper()
	var raw [2]any
	var got [2]string
	for try := 0; ; try++ {
		for i, s := range p.sides {
			e := s.in(m)
			raw[i] = ask(t, e)
			got[i] = canon(t, e, raw[i])
		}
		if got[0] == got[1] {
			return raw, got
		}
		if m != serverClock || try == 2 {
			break
		}
		t.Logf("answers differ on the server's clock; asking again")
	}
	t.Errorf("the answers of %s and %s differ (%s clock)\n%s\n--- %s:\n%s\n--- %s:\n%s",
		p.sides[0].name, p.sides[1].name, m, firstDiff(got[0], got[1]), p.sides[0].name, got[0], p.sides[1].name, got[1])
	return raw, got
}

// firstDiff names the first line where a and b differ.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("first difference at line %d:\n  1 shard:  %s\n  3 shards: %s", i+1, x, y)
		}
	}
	return ""
}

// canon renders an answer for comparison: indented JSON with the
// namespace replaced and, on the server's clock, its instants masked.
func canon(t *testing.T, e *env, v any) string {
	t.Helper()
	return indent(t, e.prepare(t, "", v))
}

// prepare turns an answer into a JSON tree and normalises it; delayq's
// output and dashboard pages, also inside lists and maps, become their
// parts, with their text split into lines; key is the field v is the
// value of.
func (e *env) prepare(t *testing.T, key string, v any) any {
	t.Helper()
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = e.prepare(t, key, x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = e.prepare(t, k, x)
		}
		return out
	case cliOut:
		out := map[string]any{"exit": v.Code, "stderr": e.text(v.Stderr)}
		if strings.HasPrefix(v.Stdout, "{") || strings.HasPrefix(v.Stdout, "[") {
			var tree any
			dec := json.NewDecoder(strings.NewReader(v.Stdout))
			dec.UseNumber()
			if err := dec.Decode(&tree); err != nil {
				t.Fatalf("delayq printed what starts as JSON but is not: %v\n%s", err, v.Stdout)
			}
			out["json"] = e.normalise("", tree)
		} else {
			out["text"] = strings.Split(e.text(v.Stdout), "\n")
		}
		return out
	case webPage:
		return map[string]any{"status": v.Status, "location": e.text(v.Location), "body": strings.Split(e.html(v.Body), "\n")}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("answer does not encode: %v", err)
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		t.Fatal(err)
	}
	return e.normalise(key, tree)
}

func indent(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// clockKeys are the fields of answers that hold the server's now, or what
// is derived from it, in structs (Go names) and in delayq's JSON.
var clockKeys = map[string]bool{
	"Now": true, "now": true,
	"Lateness": true, "lateness_ms": true,
	"LeaseRemaining": true, "lease_remaining_ms": true,
}

// shiftedKeys hold times a sharded queue's stats move from their shard's
// clock to the first shard's (broker's merge): off by the milliseconds
// between two shards' reads of TIME. The seed's times are whole seconds,
// so they are compared to the second.
var shiftedKeys = map[string]bool{
	"OldestDue": true, "oldest_due": true,
	"NextReady": true, "next_ready": true,
}

// normalise replaces the namespace in every string and, on the server's
// clock, masks the clock's instants; key is the field v is the value of.
func (e *env) normalise(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = e.normalise(k, x)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = e.normalise(key, x)
		}
		return v
	case string:
		if e.mode == serverClock && shiftedKeys[key] {
			if ts, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return ts.Round(time.Second).UTC().Format(time.RFC3339Nano)
			}
		}
		if e.mode == serverClock && clockKeys[key] {
			return "<server clock>"
		}
		return e.text(v)
	default:
		if e.mode == serverClock && clockKeys[key] {
			return "<server clock>"
		}
		return v
	}
}

// text replaces the namespace, and the signature and time of a notice
// link (a redirect after a dashboard action).
func (e *env) text(s string) string {
	return noticeSig.ReplaceAllString(strings.ReplaceAll(s, e.ns, "<ns>"), "sig=<sig>${1}t=<t>")
}

var (
	csrfValue = regexp.MustCompile(`name="csrf" value="[^"]*"`)
	clockSpan = regexp.MustCompile(`<time datetime="[^"]*">[^<]*</time>`)
	// what dashboard's formatDuration and formatTime print
	durationRE  = regexp.MustCompile(`\b\d+(ms|\.\ds|m\d\ds|h\d\dm|d\d\dh)\b`)
	timestampRE = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`)
	relativeRE  = regexp.MustCompile(`in <dur>|<dur> ago|>now<`)
	// Notices after an action are signed with this machine's clock.
	noticeSig = regexp.MustCompile(`sig=[A-Za-z0-9_-]*(&|&amp;)t=\d+`)
	// The dead job page has no server time to show (the dashboard reads
	// no stats for it): it renders the age of the record against this
	// machine's clock.
	deadAge = regexp.MustCompile(`(<dt>Died</dt><dd>[^(<]*)\([^)<]*\)`)
	// Memory is an estimate of different keys (a shard's keys each) and
	// of the whole server, which both comparisons share.
	memoryCard = regexp.MustCompile(`(id="q-memory">)[^<]*(</span><span class="l" id="q-memory-note">)[^<]*(</span>)|(id="server-memory">)[^<]*(</span><span class="l" id="server-memory-note">)[^<]*(</span>)`)
)

// html normalises a dashboard page: the namespace, the CSRF token (tied to
// a random session cookie), the server time in the header, the age of a
// dead job and the memory cards always; on
// the server's clock also every duration and timestamp, which are read
// against that clock.
func (e *env) html(s string) string {
	s = e.text(s)
	s = csrfValue.ReplaceAllString(s, `name="csrf" value="<csrf>"`)
	s = clockSpan.ReplaceAllString(s, `<time>`)
	s = deadAge.ReplaceAllString(s, `$1(<age>)`)
	s = memoryCard.ReplaceAllString(s, `${1}${4}<bytes>${2}${5}<memory>${3}${6}`)
	if e.mode == serverClock {
		s = durationRE.ReplaceAllString(s, "<dur>")
		s = relativeRE.ReplaceAllString(s, "<rel>")
		s = timestampRE.ReplaceAllString(s, "<ts>")
	}
	return s
}

// errOut is an error as an answer: its text and, for a batch, each entry's.
// cancelOut is what a cancel answered: errOut of its error, or whether it
// found the job running.
func cancelOut(c job.Cancelled, err error) any {
	if err != nil {
		return errOut(err)
	}
	return map[string]any{"running": c.Running}
}

func errOut(err error) any {
	if err == nil {
		return nil
	}
	var be *job.BatchError
	if errors.As(err, &be) {
		entries := make([]any, len(be.Errs))
		for i, e := range be.Errs {
			entries[i] = errOut(e)
		}
		return map[string]any{"error": err.Error(), "entries": entries, "sentinels": sentinels(err)}
	}
	return map[string]any{"error": err.Error(), "sentinels": sentinels(err)}
}

// sentinels names the errors err wraps that callers test for.
func sentinels(err error) []string {
	var out []string
	for _, s := range []struct {
		name string
		err  error
	}{
		{"ErrNotFound", broker.ErrNotFound}, {"ErrDuplicate", broker.ErrDuplicate}, {"ErrInProgress", broker.ErrInProgress},
		{"ErrInvalid", job.ErrInvalid}, {"ErrShardCount", broker.ErrShardCount},
	} {
		if errors.Is(err, s.err) {
			out = append(out, s.name)
		}
	}
	return out
}

// jobOut is a JobInfo as an answer: its decode error as text, and the
// durations it derives from its clock.
type jobOut struct {
	*job.JobInfo
	Err            any `json:",omitempty"`
	Lateness       time.Duration
	LeaseRemaining time.Duration
}

// lateness is how long a scheduled job has been due, 0 for another state.
func lateness(j *job.JobInfo) time.Duration {
	if j.State != job.StateScheduled {
		return 0
	}
	return max(j.Now.Sub(j.ReadyAt), 0)
}

// leaseLeft is how long a processing job's lease has left, 0 for another
// state.
func leaseLeft(j *job.JobInfo) time.Duration {
	if j.State != job.StateProcessing {
		return 0
	}
	return max(j.LeaseDeadline.Sub(j.Now), 0)
}

func jobAnswer(j *job.JobInfo, err error) any {
	if err != nil {
		return map[string]any{"err": errOut(err)}
	}
	return jobOut{JobInfo: j, Err: errOut(j.Err), Lateness: lateness(j), LeaseRemaining: leaseLeft(j)}
}

func jobsAnswer(js []*job.JobInfo) []any {
	out := make([]any, len(js))
	for i, j := range js {
		out[i] = jobAnswer(j, nil)
	}
	return out
}
