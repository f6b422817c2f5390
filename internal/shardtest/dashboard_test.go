package shardtest

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestDashboardReads fetches every dashboard page: the overview, each
// queue's page followed through its pagers, the job pages, the search, the
// dead letters with and without filters followed through their pagers and
// scan budgets, and the dead job page.
func TestDashboardReads(t *testing.T) {
	t.Parallel()
	runReads(t, dashboardReads())
}

// page is a question that fetches one path.
func page(path string) question {
	return func(t *testing.T, e *env) any { return e.web(t).get(t, path) }
}

// follow fetches path and then, page after page, the first link whose text
// is one of texts, until a page has none; it returns every page.
func follow(start string, texts ...string) question {
	return func(t *testing.T, e *env) any {
		w := e.web(t)
		path := start
		var out []any
		for range 100 {
			p := w.get(t, path)
			out = append(out, p)
			if p.Status != http.StatusOK {
				return out
			}
			next := ""
			for _, text := range texts {
				if l := links(p.Body, text); len(l) > 0 {
					next = l[0]
					break
				}
			}
			if next == "" {
				return out
			}
			path = resolve(t, path, next)
		}
		t.Fatalf("the pages from %s do not end", path)
		return nil
	}
}

// resolve resolves a link on the page at base.
func resolve(t *testing.T, base, ref string) string {
	t.Helper()
	b, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r, err := url.Parse(ref)
	if err != nil {
		t.Fatal(err)
	}
	return b.ResolveReference(r).String()
}

func dashboardReads() []readCase {
	cases := []readCase{
		{"overview", page("/")},
		{"queue/orders, scheduled pages", func(t *testing.T, e *env) any {
			pages := follow("/queues/orders", "Later jobs →")(t, e).([]any)
			if len(pages) < 2 {
				t.Errorf("%s: the queue page of orders (%d scheduled jobs) has %d pages", e.name, nScheduled, len(pages))
			}
			for _, p := range pages {
				body := p.(webPage).Body
				for _, id := range []string{processingID(0), processingID(49)} {
					if !strings.Contains(body, ">"+id+"<") {
						t.Errorf("%s: the queue page of orders does not list %s", e.name, id)
					}
				}
			}
			return pages
		}},
		{"queue/orders, processing pages", follow("/queues/orders", "More processing jobs →")},
		{"queue/mail", page("/queues/mail")},
		{"queue/never used", page("/queues/never-used")},
		{"queue/bad name", page("/queues/bad%20queue%21")},
		{"queue/bad cursor", page("/queues/orders?s=nope")},
		{"queue/search, found", page("/queues/orders?id=" + futureID(17))},
		{"queue/search, dead", page("/queues/orders?id=" + deadID(17))},
		{"queue/search, not found", page("/queues/orders?id=never-enqueued")},
		{"dead", follow("/dead", "Older →")},
		{"dead/orders", func(t *testing.T, e *env) any {
			pages := follow("/dead?queue=orders", "Older →")(t, e).([]any)
			n := 0
			for _, p := range pages {
				n += strings.Count(p.(webPage).Body, `/dead/orders/job?id=d-`)
			}
			if n != nDead {
				t.Errorf("%s: the dead-letter pages of orders link %d dead jobs, want %d", e.name, n, nDead)
			}
			return pages
		}},
		{"dead/mail", page("/dead?queue=mail")},
		{"dead/type", follow("/dead?queue=orders&type=order.ship", "Continue scanning older records →", "Older →")},
		{"dead/type, every queue", follow("/dead?type=mail.send", "Continue scanning older records →", "Older →")},
		{"dead/error", follow("/dead?error=timeout", "Continue scanning older records →", "Older →")},
		{"dead/type and error", follow("/dead?queue=orders&type=order.create&error=nil+map", "Continue scanning older records →", "Older →")},
		{"dead/bad cursor", page("/dead?cursor=nope")},
		{"dead job/not found", page("/dead/orders/job?id=" + futureID(3))},
	}
	for _, id := range []string{dueID(2), futureID(30), retriedID(2), redeadID, processingID(33), deadID(40), "never-enqueued"} {
		cases = append(cases, readCase{"job/" + id, page("/queues/orders/job?id=" + id)})
	}
	for _, id := range []string{deadID(0), deadID(41), redeadID} {
		cases = append(cases, readCase{"dead job/" + id, page("/dead/orders/job?id=" + id)})
	}
	return cases
}
