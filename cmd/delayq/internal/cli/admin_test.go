package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
)

// TestAdminFunctions: admin load-functions loads this version's library (on
// every master of a cluster), admin functions lists it as this version's,
// --functions (or $DELAYQ_FUNCTIONS=1) makes the commands call it, and
// delete-functions refuses a name that is not a delayq library's.
func TestAdminFunctions(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	lib, _ := protocol.Admin(tb.b).FunctionLibrary()
	if out := tb.ok(t, "admin", "load-functions"); out != "loaded "+lib+"\n" {
		t.Fatalf("admin load-functions: %q", out)
	}
	masters := "1"
	if redistest.Topology() == "cluster" {
		masters = "3"
	}
	if out := tb.ok(t, "admin", "functions"); !regexp.MustCompile(`(?m)^` + lib + `\s+` + masters + ` of ` + masters + `\s+yes$`).MatchString(out) {
		t.Fatalf("admin functions:\n%s", out)
	}
	var listed struct {
		Libraries []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Masters int    `json:"masters"`
		} `json:"libraries"`
		Masters int `json:"masters"`
	}
	tb.okJSON(t, &listed, "admin", "functions")
	found := false
	for _, l := range listed.Libraries {
		found = found || (l.Name == lib && l.Current && l.Masters == listed.Masters)
	}
	if !found {
		t.Fatalf("admin functions --json: %+v", listed)
	}
	tb.ok(t, "enqueue", "--type", "t", "--payload", `{}`, "--queue", "fq", "--id", "f1", "--in", "1h", "--functions")
	r := runBinary(t, []string{"REDIS_URL=" + tb.url, "DELAYQ_FUNCTIONS=1"}, "", "jobs", "ls", "--queue", "fq", "--namespace", tb.ns, "--json")
	var jobs struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &jobs) != nil || len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != "f1" {
		t.Fatalf("jobs ls with $DELAYQ_FUNCTIONS=1: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	if out := tb.ok(t, "admin", "delete-functions", admin.FunctionLibraryPrefix+"00000000000000aa"); !strings.Contains(out, "deleted") {
		t.Fatalf("delete-functions of a library no server holds: %q", out)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"admin", "delete-functions", "mylib"}, `"mylib" is not the name of a delayq function library`},
		{nil, []string{"admin", "delete-functions"}, "expected one library name"},
		{nil, []string{"admin"}, "admin needs a subcommand: load-functions, functions, delete-functions"},
		{[]string{"DELAYQ_FUNCTIONS=yes"}, []string{"stats"}, `$DELAYQ_FUNCTIONS is "yes": want 1 or 0`},
	} {
		r := runBinary(t, append([]string{"REDIS_URL=" + tb.url}, c.env...), "", append(c.args, "--namespace", tb.ns)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("delayq %q: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
