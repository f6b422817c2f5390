package cli_test

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/broker"
)

// TestStatsCountDeadTrimmed: a queue whose dead letters are capped at 100
// receives 250 deaths; stats and queues ls (table and --json) count the 150
// records the cap trimmed, and an operator's trim by age counts as age.
func TestStatsCountDeadTrimmed(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	capped, err := broker.New(tb.rdb, broker.Options{Namespace: tb.ns, DeadCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	tb.b = capped
	tb.killMany(t, "q", 250, "t")
	tb.checkStats(t, "q", 0, 0, 100)

	type trimmed struct {
		Queue      string `json:"queue"`
		Dead       int64  `json:"dead"`
		Cap        int64  `json:"dead_trimmed_cap"`
		Age        int64  `json:"dead_trimmed_age"`
		Unarchived int64  `json:"dead_trimmed_unarchived"`
	}
	var st struct {
		Queues []trimmed `json:"queues"`
	}
	tb.okJSON(t, &st, "stats")
	if want := (trimmed{Queue: "q", Dead: 100, Cap: 150}); len(st.Queues) != 1 || st.Queues[0] != want {
		t.Fatalf("stats --json: %+v, want [%+v]", st.Queues, want)
	}
	var ls struct {
		Queues []trimmed `json:"queues"`
	}
	tb.okJSON(t, &ls, "queues", "ls")
	if want := (trimmed{Queue: "q", Dead: 100, Cap: 150}); len(ls.Queues) != 1 || ls.Queues[0] != want {
		t.Fatalf("queues ls --json: %+v, want [%+v]", ls.Queues, want)
	}
	if out := tb.ok(t, "stats"); !strings.Contains(out, "TRIMMED") || !strings.Contains(out, "150 cap") {
		t.Fatalf("stats does not show the trimmed records:\n%s", out)
	}
	if out := tb.ok(t, "queues", "ls"); !strings.Contains(out, "TRIMMED") || !strings.Contains(out, "150 cap") {
		t.Fatalf("queues ls does not show the trimmed records:\n%s", out)
	}

	if out := tb.ok(t, "dead", "trim", "--max-age", "1ms", "--queue", "q"); !strings.Contains(out, "dropped 100") {
		t.Fatalf("trim by age: %q", out)
	}
	tb.okJSON(t, &st, "stats")
	if want := (trimmed{Queue: "q", Dead: 0, Cap: 150, Age: 100}); len(st.Queues) != 1 || st.Queues[0] != want {
		t.Fatalf("stats --json after a trim by age: %+v, want [%+v]", st.Queues, want)
	}
	if out := tb.ok(t, "stats"); !strings.Contains(out, "150 cap, 100 age") {
		t.Fatalf("stats after a trim by age:\n%s", out)
	}
}
