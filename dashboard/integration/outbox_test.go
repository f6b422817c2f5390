package integration_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/relaystatus"
	"github.com/delayq/delayq/internal/sqlitefixture"
	"github.com/delayq/delayq/job"
)

// TestOverviewShowsOutboxRelays: the overview lists the outbox relays with
// their lag, pending and relayed rows, when last seen, and a failing
// relay's error as text.
func TestOverviewShowsOutboxRelays(t *testing.T) {
	t.Parallel()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(d)
	t.Cleanup(web.Close)
	client := web.Client() // not http.DefaultTransport, which other tests' servers close idle connections of
	overview := func() string {
		t.Helper()
		res, err := client.Get(web.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("overview: %d, %v\n%s", res.StatusCode, err, body)
		}
		return string(body)
	}
	if strings.Contains(overview(), "Outbox relays") {
		t.Fatal("the overview lists outbox relays before any ran")
	}
	report := job.New[struct {
		Kind string `json:"kind"`
	}]("report.build", job.Queue("reports"))
	reports := func(n int) []*job.Envelope {
		envs := make([]*job.Envelope, n)
		for i := range envs {
			env, err := report.Envelope(struct {
				Kind string `json:"kind"`
			}{Kind: "r"})
			if err != nil {
				t.Fatal(err)
			}
			envs[i] = env
		}
		return envs
	}
	sqlitefixture.StartRelay(t, b, "billing-relay", reports(2))
	sqlitefixture.StartRelay(t, sqlitefixture.DownBroker{Broker: b}, "orders<b>-relay", reports(3))
	sqlitefixture.WaitRelays(t, b, func(rs []relaystatus.Status) bool {
		return len(rs) == 2 && rs[0].Relayed == 2 && rs[1].Pending == 3 && rs[1].Error != ""
	})
	body := overview()
	for _, want := range []string{"<h2>Outbox relays</h2>", `id="relays"`,
		"<bdi>billing-relay</bdi>", "<bdi>delayq_outbox</bdi>", `<span class="state s-live">live</span>`,
		"<bdi>orders&lt;b&gt;-relay</bdi>", `<span class="state s-dead">failing</span>`, "enqueue refused (test)",
		`<td class="r" data-count="pending">3</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if strings.Contains(body, "orders<b>") {
		t.Error("the overview shows a relay's name as markup")
	}
}
