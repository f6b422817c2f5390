package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestNamespaceReadersSurviveACorruptQueue: one queue whose attempts
// counter and dead-letter index keys another program overwrote with
// strings, and one whose shard count in ns:shards is not a number, do not
// make the readers of the whole namespace fail: stats, queues ls and dead
// ls show every other queue and name the two left out, with the key or
// record to repair; jobs ls and jobs show answer for the other queues, and
// for the broken one fail naming what is wrong.
func TestNamespaceReadersSurviveACorruptQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, q := range []string{"good", "corrupt"} {
		for id, delay := range map[string]time.Duration{"waiting": time.Hour, "dying": 0} {
			if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: id, Queue: q, Type: "t", Payload: []byte(`{}`), Delay: delay}); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range testkit.Claim(t, tb.b, q, 1, time.Minute) {
			testkit.Kill(t, tb.b, c, "boom in "+q)
		}
	}
	for _, name := range []string{"attempts", "dead:index"} {
		if err := tb.rdb.Set(tb.ctx, tb.key("corrupt", name), "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deadIndex := tb.key("corrupt", "dead:index")
	shards := keyspace.ShardsKey(tb.ns)
	if err := tb.rdb.HSet(tb.ctx, shards, "badcount", "many").Err(); err != nil {
		t.Fatal(err)
	}
	if err := tb.rdb.SAdd(tb.ctx, keyspace.QueuesKey(tb.ns), "badcount").Err(); err != nil {
		t.Fatal(err)
	}
	leftOut := func(t *testing.T, args []string, r result) {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("delayq %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
		for _, want := range []string{"queue corrupt left out", deadIndex, "queue badcount left out", `"many", not a number (field "badcount" of ` + shards} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("delayq %q: stderr does not say %q:\n%s", args, want, r.stderr)
			}
		}
	}
	for _, args := range [][]string{{"stats"}, {"queues", "ls"}, {"dead", "ls"}} {
		r := tb.run(t, args...)
		leftOut(t, args, r)
		if !strings.Contains(r.stdout, "good") {
			t.Errorf("delayq %q does not show queue good:\n%s", args, r.stdout)
		}
		if args[0] == "dead" && !strings.Contains(r.stdout, "boom in good") {
			t.Errorf("dead ls does not show good's dead job:\n%s", r.stdout)
		}
		var out struct {
			Unreadable []struct{ Queue, Error string } `json:"unreadable"`
		}
		r = tb.run(t, append(args, "--json")...)
		if r.code != 0 {
			t.Fatalf("delayq %q --json: exit %d, stderr %q", args, r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("delayq %q --json: %v\n%s", args, err, r.stdout)
		}
		if len(out.Unreadable) != 2 || out.Unreadable[0].Queue != "badcount" || out.Unreadable[1].Queue != "corrupt" ||
			!strings.Contains(out.Unreadable[1].Error, deadIndex) {
			t.Errorf("delayq %q --json: unreadable %+v", args, out.Unreadable)
		}
	}
	if out := tb.ok(t, "jobs", "ls", "--queue", "good"); !strings.Contains(out, "waiting") {
		t.Errorf("jobs ls --queue good:\n%s", out)
	}
	if out := tb.ok(t, "jobs", "show", "waiting", "--queue", "good"); !strings.Contains(out, "scheduled") {
		t.Errorf("jobs show waiting --queue good:\n%s", out)
	}
	for _, args := range [][]string{{"jobs", "ls", "--queue", "badcount"}, {"jobs", "show", "waiting", "--queue", "badcount"}} {
		r := tb.run(t, args...)
		if r.code == 0 || !strings.Contains(r.stderr, `field "badcount" of `+shards) {
			t.Errorf("delayq %q: exit %d, stderr %q; want a failure naming the record", args, r.code, r.stderr)
		}
	}
}
