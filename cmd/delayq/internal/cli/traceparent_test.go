package cli_test

import (
	"strings"
	"testing"
)

// TestEnqueueCarriesTheCallersTrace: delayq enqueue stores the W3C trace
// context of --traceparent, or of $TRACEPARENT and $TRACESTATE, in the
// job's headers, where the worker's tracing middleware reads its parent;
// a malformed one is refused (exit 2), naming it, with nothing stored.
func TestEnqueueCarriesTheCallersTrace(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const (
		fromEnv  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		fromFlag = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	env := []string{"REDIS_URL=" + tb.url, "TRACEPARENT=" + fromEnv, "TRACESTATE=vendor=1"}
	if r := runBinary(t, env, "", "enqueue", "--type", "t", "--payload", "{}", "--id", "env", "--namespace", tb.ns); r.code != 0 {
		t.Fatalf("enqueue with $TRACEPARENT: exit %d, %s", r.code, r.stderr)
	}
	if r := runBinary(t, env, "", "enqueue", "--type", "t", "--payload", "{}", "--id", "flag", "--traceparent", fromFlag, "--namespace", tb.ns); r.code != 0 {
		t.Fatalf("enqueue --traceparent: exit %d, %s", r.code, r.stderr)
	}
	tb.ok(t, "enqueue", "--type", "t", "--payload", "{}", "--id", "none")
	for id, want := range map[string]map[string]string{
		"env":  {"traceparent": fromEnv, "tracestate": "vendor=1"},
		"flag": {"traceparent": fromFlag},
		"none": {},
	} {
		j, err := tb.b.Job(tb.ctx, "default", id)
		if err != nil {
			t.Fatal(err)
		}
		if len(j.Envelope.Headers) != len(want) {
			t.Errorf("job %s headers %v, want %v", id, j.Envelope.Headers, want)
		}
		for k, v := range want {
			if j.Envelope.Headers[k] != v {
				t.Errorf("job %s header %s = %q, want %q", id, k, j.Envelope.Headers[k], v)
			}
		}
	}
	r := tb.run(t, "enqueue", "--type", "t", "--payload", "{}", "--id", "bad", "--traceparent", "00-xyz")
	if r.code != 2 || !strings.Contains(r.stderr, `invalid trace context "00-xyz"`) {
		t.Errorf("bad --traceparent: exit %d, %q", r.code, r.stderr)
	}
	if _, err := tb.b.Job(tb.ctx, "default", "bad"); err == nil {
		t.Error("a job was stored with a bad trace context")
	}
}
