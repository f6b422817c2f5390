package shardtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/protocol"
)

// TestInspectorReads asks deadletter.Inspector's readers: List with
// filters, limits and scan budgets walked page by page, Get and Count.
func TestInspectorReads(t *testing.T) {
	t.Parallel()
	runReads(t, inspectorReads())
}

// filters select dead records of the seed; times are from its base.
func filters(base time.Time) map[string]deadletter.Filter {
	at := func(d time.Duration) time.Time { return base.Add(-30*time.Minute + d) }
	return map[string]deadletter.Filter{
		"none":               {},
		"type":               {Type: "order.ship"},
		"error":              {ErrorContains: "timeout"},
		"type and error":     {Type: "order.create", ErrorContains: "nil map"},
		"died after":         {DiedAfter: at(20 * 30 * time.Second)},
		"died before":        {DiedBefore: at(6 * 30 * time.Second)},
		"between, with type": {DiedAfter: at(3 * 30 * time.Second), DiedBefore: at(19 * 30 * time.Second), Type: "order.refund"},
		"mail type":          {Type: "mail.send"},
		"no match":           {Type: "order.none"},
	}
}

func inspectorReads() []readCase {
	ctx := context.Background()
	type listing struct {
		queue, filter  string
		limit, maxScan int
	}
	var cases []readCase
	for _, l := range []listing{
		{orders, "none", 0, 0}, {orders, "none", 1, 0}, {orders, "none", 6, 0},
		{"", "none", 7, 0}, {"", "none", 1000, 0}, {mail, "none", 1, 0},
		{orders, "type", 4, 0}, {orders, "type", 4, 7}, {"", "type", 50, 5},
		{orders, "error", 3, 0}, {"", "error", 5, 9},
		{orders, "type and error", 2, 0}, {orders, "type and error", 2, 3},
		{orders, "died after", 4, 0}, {"", "died after", 4, 6},
		{orders, "died before", 3, 0}, {"", "died before", 3, 4},
		{orders, "between, with type", 2, 0}, {"", "between, with type", 2, 5},
		{"", "mail type", 1, 0}, {"", "mail type", 5, 10}, {orders, "mail type", 5, 0},
		{orders, "no match", 5, 0}, {"", "no match", 5, 8}, {orders, "none", 5, -1},
	} {
		name := fmt.Sprintf("List/queue %q, filter %s, limit %d, max scan %d", l.queue, l.filter, l.limit, l.maxScan)
		cases = append(cases, readCase{name, func(t *testing.T, e *env) any {
			f := filters(e.base)[l.filter]
			pages, ids := walkList(t, e.dl, l.queue, deadletter.ListOptions{Filter: f, Limit: l.limit, MaxScan: l.maxScan})
			if l.filter == "none" && l.limit == 1000 {
				_, _, want := seededIDs()
				want = append(want, "m-d-0", "m-d-1")
				slices.Sort(ids)
				slices.Sort(want)
				if !slices.Equal(ids, want) {
					t.Errorf("%s: List of every queue gives %d records %v, want the %d seeded", e.name, len(ids), ids, len(want))
				}
			}
			return pages
		}})
	}
	cases = append(cases, readCase{"List/bad options", func(t *testing.T, e *env) any {
		var out []any
		for _, o := range []deadletter.ListOptions{{Limit: -1}, {Limit: protocol.DeadPageMax + 1}, {Cursor: "not a cursor"}, {Cursor: "MTIzOm9yZGVyczo"}} {
			_, err := e.dl.List(ctx, orders, o)
			out = append(out, errOut(err))
		}
		_, err := e.dl.List(ctx, "bad queue!", deadletter.ListOptions{})
		return append(out, errOut(err))
	}})
	cases = append(cases, readCase{"Get", func(t *testing.T, e *env) any {
		out := map[string]any{}
		for _, id := range allIDs() {
			r, err := e.dl.Get(ctx, orders, id)
			out[id] = []any{r, errOut(err)}
		}
		r, err := e.dl.Get(ctx, mail, "m-d-0")
		out["mail/m-d-0"] = []any{r, errOut(err)}
		return out
	}})
	cases = append(cases, readCase{"Count", func(t *testing.T, e *env) any {
		out := map[string]any{}
		for name, f := range filters(e.base) {
			for _, q := range []string{orders, mail, ""} {
				n, err := e.dl.Count(ctx, q, f)
				if name == "none" && q == orders && n != nDead {
					t.Errorf("%s: Count(orders) = %d, %v; want %d", e.name, n, err, nDead)
				}
				out[fmt.Sprintf("%s/%q", name, q)] = []any{n, errOut(err)}
			}
		}
		return out
	}})
	return cases
}

// walkList follows List's cursor from the first page to the last.
func walkList(t *testing.T, in *deadletter.Inspector, queue string, o deadletter.ListOptions) ([]any, []string) {
	t.Helper()
	var (
		pages []any
		ids   []string
	)
	for range 1000 {
		p, err := in.List(context.Background(), queue, o)
		if err != nil {
			return append(pages, errOut(err)), ids
		}
		pages = append(pages, map[string]any{"Records": recordsOf(p.Records, o.Limit), "Next": p.Next, "Partial": p.Partial, "Scanned": p.Scanned})
		for _, r := range p.Records {
			ids = append(ids, r.ID)
		}
		if p.Next == "" {
			return pages, ids
		}
		o.Cursor = p.Next
	}
	t.Fatalf("the dead-letter pages of %q do not end", queue)
	return nil, nil
}
