package dashboard_test

import (
	"net/http"
	"testing"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/fixture"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// The overview lists the outbox relays with their lag, pending and
// relayed rows, when last seen, and a failing relay's error as text.
func TestOverviewShowsOutboxRelays(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	mustNotContain(t, "overview without relays", tb.get(t, "/").body, "Outbox relays")
	reports := func(n int) []*job.Envelope {
		envs := make([]*job.Envelope, n)
		for i := range envs {
			env, err := reportType.Envelope(reportArgs{Kind: "r"})
			if err != nil {
				t.Fatal(err)
			}
			envs[i] = env
		}
		return envs
	}
	fixture.StartRelay(t, tb.b, "billing-relay", reports(2))
	fixture.StartRelay(t, fixture.DownBroker{Broker: tb.b}, "orders<b>-relay", reports(3))
	fixture.WaitRelays(t, tb.b, func(rs []outbox.RelayStatus) bool {
		return len(rs) == 2 && rs[0].Relayed == 2 && rs[1].Pending == 3 && rs[1].Error != ""
	})
	r := tb.get(t, "/")
	wantStatus(t, "overview", r, http.StatusOK)
	mustContain(t, "overview", r.body, "<h2>Outbox relays</h2>", `id="relays"`,
		"<bdi>billing-relay</bdi>", "<bdi>delayq_outbox</bdi>", `<span class="state s-live">live</span>`,
		"<bdi>orders&lt;b&gt;-relay</bdi>", `<span class="state s-dead">failing</span>`, "enqueue refused (test)",
		`<td class="r" data-count="pending">3</td>`)
	mustNotContain(t, "overview", r.body, "orders<b>")
}
