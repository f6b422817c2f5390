package cli_test

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
)

// TestACLPrintsTheNamespaceRules: delayq acl prints the rules of a Redis
// user limited to the namespace (with --functions those for FCALL) without
// connecting, and refuses a bad namespace as bad usage.
func TestACLPrintsTheNamespaceRules(t *testing.T) {
	t.Parallel()
	env := []string{"REDIS_URL=redis://127.0.0.1:1/0"} // nothing listens: acl does not connect
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"acl"}, admin.ACLRules(admin.DefaultNamespace)},
		{[]string{"acl", "--namespace", "tenant-a"}, admin.ACLRules("tenant-a")},
		{[]string{"acl", "--functions", "--namespace", "tenant-a"}, admin.FunctionsACLRules("tenant-a")},
	} {
		r := runBinary(t, env, "", c.args...)
		if r.code != 0 || strings.TrimSpace(r.stdout) != c.want {
			t.Errorf("delayq %q: exit %d, stdout %q, stderr %q; want %q", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	r := runBinary(t, append(env, "DELAYQ_FUNCTIONS=1"), "", "acl", "--namespace", "tenant-b")
	if r.code != 0 || strings.TrimSpace(r.stdout) != admin.FunctionsACLRules("tenant-b") {
		t.Errorf("DELAYQ_FUNCTIONS=1 delayq acl: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := runBinary(t, env, "", "acl", "--namespace", "a b"); r.code != 2 || !strings.Contains(r.stderr, "namespace") {
		t.Errorf("delayq acl with a bad namespace: exit %d, stderr %q; want 2 and the reason", r.code, r.stderr)
	}
}

// TestQueuesShards: delayq queues shards lists a queue's physical queues
// and their slots, one line per shard, as the broker's operator's side
// does.
func TestQueuesShards(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.DeclareQueue(tb.ctx, "wide", 3); err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Name string `json:"name"`
		Slot int    `json:"slot"`
	}
	tb.okJSON(t, &got, "queues", "shards", "wide")
	want, err := protocol.Admin(tb.b).Shards(tb.ctx, "wide")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("queues shards wide: %+v; want 3 shards like %+v", got, want)
	}
	for i := range got {
		if got[i].Name != want[i].Name || got[i].Slot != want[i].Slot {
			t.Errorf("shard %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	out := tb.ok(t, "queues", "shards", "default")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "default") {
		t.Errorf("queues shards default:\n%s\nwant a header and one shard named default", out)
	}
	if r := tb.run(t, "queues", "shards", "bad queue!"); r.code != 2 {
		t.Errorf("queues shards with a bad name: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
}
