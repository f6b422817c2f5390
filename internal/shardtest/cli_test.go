package shardtest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCLIReads runs every delayq subcommand that reads jobs: stats, jobs
// ls and show, dead ls and show, with --json and as tables.
func TestCLIReads(t *testing.T) {
	t.Parallel()
	runReads(t, cliReads())
}

// run is a question that runs delayq once.
func run(args ...string) question {
	return func(t *testing.T, e *env) any { return e.cli(t, "", args...) }
}

// table is run for the output people read: compared on the pinned clock
// only, since it prints durations against now.
func table(args ...string) question {
	return func(t *testing.T, e *env) any {
		if e.mode == serverClock {
			return "tables are compared on the pinned clock"
		}
		return e.cli(t, "", args...)
	}
}

// pinnedOnly asks q on the pinned clock only: variants of a listing whose
// server-clock answer adds nothing to that of the plain listing.
func pinnedOnly(q question) question {
	return func(t *testing.T, e *env) any {
		if e.mode == serverClock {
			return "asked on the pinned clock only"
		}
		return q(t, e)
	}
}

// walk runs a listing command with --json and follows the "next" cursor
// it prints to the last page; listed gets the ids of each page.
func walk(args ...string) question {
	return func(t *testing.T, e *env) any {
		var out []any
		cursor := ""
		for range 200 {
			a := append(slices.Clone(args), "--json")
			if cursor != "" {
				a = append(a, "--cursor", cursor)
			}
			r := e.cli(t, "", a...)
			out = append(out, r)
			var page struct {
				Next string `json:"next"`
			}
			if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &page) != nil || page.Next == "" {
				return out
			}
			cursor = page.Next
		}
		t.Fatalf("delayq %q: the pages do not end", args)
		return nil
	}
}

// listed returns the ids a walk listed.
func listed(t *testing.T, pages any, field string) []string {
	t.Helper()
	var ids []string
	for _, p := range pages.([]any) {
		var page map[string]json.RawMessage
		var items []struct {
			ID string `json:"id"`
		}
		out := p.(cliOut).Stdout
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if err := json.Unmarshal(page[field], &items); err != nil {
			t.Fatalf("no list %q: %v\n%s", field, err, out)
		}
		for _, j := range items {
			ids = append(ids, j.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func cliReads() []readCase {
	sch, proc, dead := seededIDs()
	pending := slices.Sorted(slices.Values(slices.Concat(sch, proc)))
	cases := []readCase{
		{"stats", run("stats", "--json")},
		{"stats/table", table("stats")},
		{"stats/queues", run("stats", "-q", orders, "-q", mail, "--json")},
		{"stats/queues/table", table("stats", "-q", orders)},
		{"stats/bad queue", run("stats", "-q", "bad queue!", "--json")},
		{"jobs ls/every page", func(t *testing.T, e *env) any {
			pages := walk("jobs", "ls", "-q", orders, "--limit", "25")(t, e)
			if ids := listed(t, pages, "jobs"); !slices.Equal(ids, pending) {
				t.Errorf("%s: jobs ls lists %d jobs %v, want the %d pending", e.name, len(ids), ids, len(pending))
			}
			return pages
		}},
		{"jobs ls/scheduled", pinnedOnly(walk("jobs", "ls", "-q", orders, "--state", "scheduled", "--limit", "30"))},
		{"jobs ls/processing", pinnedOnly(walk("jobs", "ls", "-q", orders, "--state", "processing", "--limit", "20"))},
		{"jobs ls/one page", pinnedOnly(walk("jobs", "ls", "-q", orders, "--limit", "1000"))},
		{"jobs ls/mail", pinnedOnly(walk("jobs", "ls", "-q", mail, "--limit", "2"))},
		{"jobs ls/table", table("jobs", "ls", "-q", orders, "--limit", "60")},
		{"jobs ls/table, later page", func(t *testing.T, e *env) any {
			if e.mode == serverClock {
				return "tables are compared on the pinned clock"
			}
			first := e.cli(t, "", "jobs", "ls", "-q", orders, "--limit", "60")
			_, cursor, ok := strings.Cut(strings.TrimSpace(first.Stdout), "more: --cursor ")
			if !ok {
				t.Fatalf("%s: jobs ls of 60 of %d jobs offers no more:\n%s", e.name, len(pending), first.Stdout)
			}
			return e.cli(t, "", "jobs", "ls", "-q", orders, "--limit", "60", "--cursor", cursor)
		}},
		{"jobs ls/bad queue", run("jobs", "ls", "-q", "bad queue!")},
		{"dead ls/orders", func(t *testing.T, e *env) any {
			pages := walk("dead", "ls", "-q", orders, "--limit", "15")(t, e)
			if ids := listed(t, pages, "records"); !slices.Equal(ids, dead) {
				t.Errorf("%s: dead ls lists %d records %v, want the %d seeded", e.name, len(ids), ids, len(dead))
			}
			return pages
		}},
		{"dead ls/every queue", walk("dead", "ls", "--limit", "20")},
		{"dead ls/type", pinnedOnly(walk("dead", "ls", "--type", "order.ship", "--limit", "7"))},
		{"dead ls/type, small scans", pinnedOnly(walk("dead", "ls", "--type", "order.ship", "--limit", "7", "--max-scan", "3"))},
		{"dead ls/error", pinnedOnly(walk("dead", "ls", "-q", orders, "--error", "nil map", "--limit", "5"))},
		{"dead ls/since, until", func(t *testing.T, e *env) any {
			// On the server's clock --since 25m is 25 minutes before this
			// machine's now: give the instants instead.
			since := e.base.Add(-25 * time.Minute).UTC().Format(time.RFC3339)
			until := e.base.Add(-18 * time.Minute).UTC().Format(time.RFC3339)
			return walk("dead", "ls", "--since", since, "--until", until, "--limit", "8")(t, e)
		}},
		{"dead ls/since, relative", table("dead", "ls", "--since", "25m", "--until", "18m", "--json")},
		{"dead ls/table", table("dead", "ls", "--limit", "60")},
		{"dead ls/bad cursor", run("dead", "ls", "--cursor", "nope")},
	}
	for _, id := range []string{dueID(4), futureID(9), retriedID(1), redeadID, processingID(20), deadID(7), ackedID(0), "never-enqueued"} {
		cases = append(cases,
			readCase{"jobs show/" + id, run("jobs", "show", id, "-q", orders, "--json")},
			readCase{"jobs show/" + id + "/table", table("jobs", "show", id, "-q", orders)})
	}
	for _, id := range []string{deadID(0), deadID(54), redeadID, futureID(1)} {
		cases = append(cases,
			readCase{"dead show/" + id, run("dead", "show", id, "-q", orders, "--json")},
			readCase{"dead show/" + id + "/table", table("dead", "show", id, "-q", orders)})
	}
	return cases
}
