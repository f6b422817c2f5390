package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
)

// TestDeadTrimmedShown: a queue whose dead-letter store (DeadCap 100)
// received 250 deaths shows 100 dead and, beside it, the 150 records the
// cap trimmed; a queue that trimmed nothing shows no such line.
func TestDeadTrimmedShown(t *testing.T) {
	t.Parallel()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns, DeadCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	t.Cleanup(web.Close)
	tb := &testBundle{ctx: t.Context(), rdb: rdb, ns: ns, b: b}
	errs := map[string]string{}
	for i := range 250 {
		errs[fmt.Sprintf("d-%03d", i)] = "gateway refused"
	}
	tb.kill(t, "sms", "sms.send", `{}`, errs)
	tb.kill(t, "mail", "mail.send", `{}`, map[string]string{"m-1": "bounced"})
	page := func(path string) string {
		res, err := testClient(t).Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, res)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, res.StatusCode, body)
		}
		return body
	}
	mustContain(t, "sms page", page("/queues/sms"), `id="q-dead">100<`,
		`id="q-dead-trimmed"`, "more were trimmed: 150 by the cap, 0 by age")
	mustNotContain(t, "mail page", page("/queues/mail"), `id="q-dead-trimmed"`)
	st, err := testkit.OneStats(b.Stats(t.Context(), "sms"))
	if err != nil || st.DeadTrimmedCap != 150 || st.Dead != 100 {
		t.Fatalf("Stats: dead %d, trimmed by the cap %d (%v); want 100 and 150", st.Dead, st.DeadTrimmedCap, err)
	}
}
