package cli_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/cmd/delayq/internal/cli"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// aclRights are the rights of the tool's ACL user in docs/operations.md,
// without the keys and channels.
const aclRights = "+@read +@write +@scripting +@pubsub +@connection +@transaction +time +config|get +cluster|slots"

// TestReadOnlyCommandsOnTopology runs the read-only commands through the
// binary against the shared server of the topology under test
// ($DELAYQ_TEST_TOPOLOGY): on a cluster through redis+cluster://, behind
// Sentinel through redis+sentinel://, connected as an ACL user limited to
// the test's namespace, and checks every answer against what the test
// stored: stats, jobs ls, jobs show, dead ls, dead show.
func TestReadOnlyCommandsOnTopology(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := tb.ctx
	t.Logf("topology %s", redistest.Topology())

	// Two queues, which a cluster keeps in different slots: a scheduled
	// job in each, a processing one in mail, a dead one in sms.
	if err := tb.b.Enqueue(ctx,
		&job.Envelope{ID: "welcome-1", Queue: "mail", Type: "email.send", Payload: []byte(`{"to":"ann"}`), Delay: time.Hour},
		&job.Envelope{ID: "digest-3", Queue: "mail", Type: "email.digest", Payload: []byte(`{"week":1}`)},
		&job.Envelope{ID: "remind-2", Queue: "sms", Type: "sms.send", Payload: []byte(`{"to":"+1555"}`), Delay: 2 * time.Hour},
		&job.Envelope{ID: "sms-9", Queue: "sms", Type: "sms.send", Payload: []byte(`{"to":"+1556"}`)},
	); err != nil {
		t.Fatal(err)
	}
	claim := func(queue, id string) protocol.Claimed {
		t.Helper()
		got := testkit.Claim(t, tb.b, queue, 1, time.Hour)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("claim %s from %s: %+v", id, queue, got)
		}
		return got[0]
	}
	claim("mail", "digest-3")
	const deadErr = "twilio: 429 too many requests\nretry-after: 30"
	testkit.Kill(t, tb.b, claim("sms", "sms-9"), deadErr)

	user, pass := "cli-"+randHex(t), "pw-"+randHex(t)
	createUser(t, user, "on >"+pass+" ~"+tb.ns+":* resetchannels &"+tb.ns+":* "+aclRights)
	env := []string{"REDIS_URL=" + cli.TopologyURL(t, user+":"+pass+"@")}
	run := func(t *testing.T, v any, args ...string) string {
		t.Helper()
		r := runBinary(t, env, "", append(args, "--namespace", tb.ns)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("delayq %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		if v != nil {
			if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
				t.Fatalf("delayq %s: %v\n%s", strings.Join(args, " "), err, r.stdout)
			}
		}
		return r.stdout
	}

	t.Run("stats", func(t *testing.T) {
		var s statsOut
		run(t, &s, "stats", "--json")
		got := map[string][4]int64{}
		for _, q := range s.Queues {
			got[q.Queue] = [4]int64{q.Scheduled, q.Due, q.Processing, q.Dead}
		}
		want := map[string][4]int64{"mail": {1, 0, 1, 0}, "sms": {1, 0, 0, 1}}
		if len(got) != 2 || got["mail"] != want["mail"] || got["sms"] != want["sms"] {
			t.Fatalf("stats: scheduled/due/processing/dead %v, want %v", got, want)
		}
		out := run(t, nil, "stats")
		if !regexpLine(out, `^mail \(no live worker\) +1 +0 +1 +0 +- +- +in (1h|59m[0-5]\ds)$`) || !regexpLine(out, `^\(total\) +2 +0 +1 +1 +-$`) {
			t.Fatalf("stats table:\n%s", out)
		}
	})
	t.Run("jobs ls", func(t *testing.T) {
		type page struct {
			Jobs []struct {
				ID, State, Type string
			} `json:"jobs"`
			Next string `json:"next"`
		}
		var all page
		run(t, &all, "jobs", "ls", "--queue", "mail", "--json")
		var got []string
		for _, j := range all.Jobs {
			got = append(got, j.ID+"/"+j.State+"/"+j.Type)
		}
		if want := []string{"digest-3/processing/email.digest", "welcome-1/scheduled/email.send"}; !slices.Equal(got, want) || all.Next != "" {
			t.Fatalf("jobs ls: %q next %q, want %q", got, all.Next, want)
		}
		// A page of one continues with the other list.
		var first, second page
		run(t, &first, "jobs", "ls", "--queue", "mail", "--limit", "1", "--json")
		if len(first.Jobs) != 1 || first.Jobs[0].ID != "digest-3" || first.Next == "" {
			t.Fatalf("jobs ls --limit 1: %+v", first)
		}
		run(t, &second, "jobs", "ls", "--queue", "mail", "--limit", "1", "--cursor", first.Next, "--json")
		if len(second.Jobs) != 1 || second.Jobs[0].ID != "welcome-1" || second.Next != "" {
			t.Fatalf("jobs ls second page: %+v", second)
		}
	})
	t.Run("jobs show", func(t *testing.T) {
		var j struct {
			ID, Queue, State, Type string
			Attempts               int
			Payload                json.RawMessage
			LeaseRemainingMS       *int64 `json:"lease_remaining_ms"`
		}
		run(t, &j, "jobs", "show", "digest-3", "--queue", "mail", "--json")
		if j.ID != "digest-3" || j.Queue != "mail" || j.State != "processing" || j.Type != "email.digest" ||
			j.Attempts != 1 || string(j.Payload) != `{"week":1}` || j.LeaseRemainingMS == nil || *j.LeaseRemainingMS <= 0 {
			t.Fatalf("jobs show digest-3: %+v", j)
		}
		out := run(t, nil, "jobs", "show", "remind-2", "--queue", "sms")
		for _, line := range []string{`^ID: +remind-2$`, `^State: +scheduled$`, `^Ready: .*\(ready in (2h|1h59m[0-5]\ds)\)$`, `^Payload: +\{"to":"\+1555"\}$`} {
			if !regexpLine(out, line) {
				t.Fatalf("jobs show remind-2 lacks %s:\n%s", line, out)
			}
		}
	})
	t.Run("dead ls", func(t *testing.T) {
		var out deadLsOut
		run(t, &out, "dead", "ls", "--json")
		if len(out.Records) != 1 || out.Records[0].ID != "sms-9" || out.Records[0].Queue != "sms" ||
			out.Records[0].Type != "sms.send" || out.Records[0].Error != deadErr || out.Next != "" {
			t.Fatalf("dead ls: %+v", out)
		}
		run(t, &out, "dead", "ls", "--queue", "mail", "--json")
		if len(out.Records) != 0 {
			t.Fatalf("dead ls --queue mail: %+v", out)
		}
	})
	t.Run("dead show", func(t *testing.T) {
		var d struct {
			ID, Queue, Type, Error string
			Attempts               int
		}
		run(t, &d, "dead", "show", "sms-9", "--queue", "sms", "--json")
		if d.ID != "sms-9" || d.Queue != "sms" || d.Type != "sms.send" || d.Error != deadErr || d.Attempts != 1 {
			t.Fatalf("dead show sms-9: %+v", d)
		}
		out := run(t, nil, "dead", "show", "sms-9", "--queue", "sms")
		if !strings.HasSuffix(out, "Error:\n  twilio: 429 too many requests\n  retry-after: 30\n") {
			t.Fatalf("dead show sms-9:\n%s", out)
		}
	})

	// Nothing the commands did changed what is stored.
	if n := tb.rdb.ZCard(ctx, tb.key("mail", "scheduled")).Val(); n != 1 {
		t.Fatalf("mail holds %d scheduled jobs after the read-only commands, want 1", n)
	}
	// The URL's password is the user's: a wrong one is refused, and shown
	// nowhere.
	r := runBinary(t, []string{"REDIS_URL=" + cli.TopologyURL(t, user+":NotThePassword@")}, "", "stats", "--namespace", tb.ns)
	if r.code != 1 || !strings.Contains(r.stderr, "WRONGPASS") || strings.Contains(r.stderr, "NotThePassword") {
		t.Fatalf("stats with a wrong password: %+v", r)
	}
}

// TestClusterFromOneSeed: the CLI finds every master of a cluster from one
// seed node.
func TestClusterFromOneSeed(t *testing.T) {
	t.Parallel()
	if redistest.Topology() != "cluster" {
		t.Skip("needs DELAYQ_TEST_TOPOLOGY=cluster (.ci/run runs it)")
	}
	tb := setup(t)
	var envs []*job.Envelope
	for _, q := range []string{"a", "b", "c", "d", "e", "f"} {
		envs = append(envs, &job.Envelope{Queue: q, Type: "t", Delay: time.Hour})
	}
	if err := tb.b.Enqueue(tb.ctx, envs...); err != nil {
		t.Fatal(err)
	}
	url := "redis+cluster://" + redistest.TopologyAddrs(t)[0]
	r := runBinary(t, []string{"REDIS_URL=" + url}, "", "stats", "--json", "--namespace", tb.ns)
	var s statsOut
	if err := json.Unmarshal([]byte(r.stdout), &s); r.code != 0 || err != nil || len(s.Queues) != 6 {
		t.Fatalf("stats from one seed: %+v (%v)", r, err)
	}
	for _, q := range s.Queues {
		if q.Scheduled != 1 {
			t.Fatalf("queue %s: %d scheduled, want 1", q.Queue, q.Scheduled)
		}
	}
}

// TestSentinelCredentials: Sentinels that require a password get it from
// DELAYQ_SENTINEL_USER and DELAYQ_SENTINEL_PASSWORD; a wrong one is
// refused without showing it.
func TestSentinelCredentials(t *testing.T) {
	t.Parallel()
	if redistest.Topology() != "sentinel" {
		t.Skip("needs DELAYQ_TEST_TOPOLOGY=sentinel (.ci/run runs it)")
	}
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{Queue: "q", Type: "t", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	user, pass := "sentinel-"+randHex(t), "pw-"+randHex(t)
	for _, addr := range redistest.TopologyAddrs(t) {
		aclUser(t, addr, user, "on >"+pass+" +@all")
	}
	url := []string{"REDIS_URL=" + tb.url, "DELAYQ_SENTINEL_USER=" + user}
	r := runBinary(t, append(url, "DELAYQ_SENTINEL_PASSWORD="+pass), "", "stats", "--json", "--namespace", tb.ns)
	if r.code != 0 || !strings.Contains(r.stdout, `"scheduled":1`) {
		t.Fatalf("stats with the Sentinels' credentials: %+v", r)
	}
	r = runBinary(t, append(url, "DELAYQ_SENTINEL_PASSWORD=NotThePassword"), "", "stats", "--namespace", tb.ns)
	if r.code != 1 || !strings.Contains(r.stderr, "through the Sentinels at") || strings.Contains(r.stderr, "NotThePassword") {
		t.Fatalf("stats with a wrong Sentinel password: %+v", r)
	}
}

func randHex(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// regexpLine reports whether a line of out matches the expression.
func regexpLine(out, expr string) bool {
	return regexp.MustCompile("(?m)" + expr).MatchString(out)
}

// createUser creates an ACL user on every data server of the shared
// topology (ACLs are not replicated) and deletes it at cleanup.
func createUser(t *testing.T, name, rules string) {
	t.Helper()
	ctx := context.Background()
	var addrs []string
	switch redistest.Topology() {
	case "cluster":
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.TopologyAddrs(t)})
		defer cc.Close()
		nodes, err := cc.ClusterNodes(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
			f := strings.Fields(line)
			addrs = append(addrs, strings.Split(f[1], "@")[0])
		}
	case "sentinel":
		sc := redis.NewSentinelClient(&redis.Options{Addr: redistest.TopologyAddrs(t)[0]})
		defer sc.Close()
		m, err := sc.GetMasterAddrByName(ctx, redistest.SentinelMaster).Result()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, net.JoinHostPort(m[0], m[1]))
		replicas, err := sc.Replicas(ctx, redistest.SentinelMaster).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range replicas {
			addrs = append(addrs, net.JoinHostPort(r["ip"], r["port"]))
		}
	default:
		addrs = redistest.TopologyAddrs(t)
	}
	for _, addr := range addrs {
		aclUser(t, addr, name, rules)
	}
}

// aclUser creates an ACL user on one server (or Sentinel) and deletes it at
// cleanup.
func aclUser(t *testing.T, addr, name, rules string) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	args := []any{"ACL", "SETUSER", name, "reset"}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER on %s: %v", addr, err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		if err := c.Do(context.Background(), "ACL", "DELUSER", name).Err(); err != nil {
			t.Errorf("ACL DELUSER on %s: %v", addr, err)
		}
	})
}
