package cli_test

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/relaystatus"
	"github.com/delayq/delayq/internal/sqlitefixture"
	"github.com/delayq/delayq/job"
)

// TestStatsShowsOutboxRelays: delayq stats lists each outbox relay that
// recorded its status: lag, pending, relayed, seen, and a failing one's
// last error; --json has them under outbox_relays.
func TestStatsShowsOutboxRelays(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if out := tb.ok(t, "stats"); strings.Contains(out, "OUTBOX RELAY") {
		t.Fatalf("stats shows relays before any ran:\n%s", out)
	}
	sqlitefixture.StartRelay(t, tb.b, "billing-relay", digests(t, 2))
	sqlitefixture.StartRelay(t, sqlitefixture.DownBroker{Broker: tb.b}, "orders-relay", digests(t, 3))
	sqlitefixture.WaitRelays(t, tb.b, func(rs []relaystatus.Status) bool {
		return len(rs) == 2 && rs[0].Relayed == 2 && rs[0].Pending == 0 && rs[1].Pending == 3 && rs[1].Error != "" && rs[1].Lag > 0
	})
	out := tb.ok(t, "stats")
	for _, want := range []string{
		"OUTBOX RELAY   TABLE",
		"billing-relay  delayq_outbox",
		"orders-relay   delayq_outbox",
		"failing: outbox: ",
		"enqueue refused (test)",
		"mail", // the relayed jobs' queue
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
	var js struct {
		Outbox []struct {
			Name      string  `json:"name"`
			LagMS     int64   `json:"lag_ms"`
			Pending   int64   `json:"pending"`
			Relayed   int64   `json:"relayed"`
			Seen      *string `json:"seen"`
			Stale     bool    `json:"stale"`
			LastError string  `json:"last_error"`
		} `json:"outbox_relays"`
	}
	tb.okJSON(t, &js, "stats")
	if len(js.Outbox) != 2 {
		t.Fatalf("stats --json: %+v, want two relays", js.Outbox)
	}
	bill, orders := js.Outbox[0], js.Outbox[1]
	if bill.Name != "billing-relay" || bill.Pending != 0 || bill.Relayed != 2 || bill.Stale || bill.LastError != "" || bill.Seen == nil {
		t.Errorf("billing-relay: %+v", bill)
	}
	if orders.Name != "orders-relay" || orders.Pending != 3 || orders.Relayed != 0 || orders.LagMS <= 0 || !strings.Contains(orders.LastError, "enqueue refused (test)") {
		t.Errorf("orders-relay: %+v", orders)
	}
}

// digests returns n envelopes of digest jobs.
func digests(t *testing.T, n int) []*job.Envelope {
	t.Helper()
	envs := make([]*job.Envelope, n)
	for i := range envs {
		env, err := digestType.Envelope(digestArgs{Week: i})
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = env
	}
	return envs
}
