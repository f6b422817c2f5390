package dashboard_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/dashboard"
)

// TestQueueChartsOver24Hours: the queue page's charts cover the last hour
// by the minute, or with ?span=24h the last 24 hours by the quarter hour,
// from the history Redis keeps; another span is refused, naming it.
func TestQueueChartsOver24Hours(t *testing.T) {
	t.Parallel()
	tb := setup(t, dashboard.Options{})
	tb.enqueue(t, "q", "a", "t", `{}`, time.Hour)
	now, err := tb.rdb.Time(tb.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Five hours ago, 7 jobs were done and 2 died in one minute, the
	// latest claimed 90 s late; 30 minutes ago 3 were done.
	write := func(ago time.Duration, fields ...any) {
		minute := now.Add(-ago).UnixMilli() / 60_000
		key := tb.ns + ":{q}:hist:" + strconv.FormatInt(minute, 10)
		if err := tb.rdb.HSet(tb.ctx, key, fields...).Err(); err != nil {
			t.Fatal(err)
		}
		tb.rdb.Expire(tb.ctx, key, 25*time.Hour)
	}
	write(5*time.Hour, "done", 7, "dead", 2, "claimed", 9, "late_sum", 90_000, "late_max", 90_000)
	write(30*time.Minute, "done", 3, "claimed", 3)

	hour := tb.get(t, "/queues/q")
	if hour.status != http.StatusOK || !strings.Contains(hour.body, `<span class="total">3 in the last hour</span>`) {
		t.Fatalf("1h page: %d, want 3 handled in the last hour:\n%s", hour.status, between(hour.body, `id="spans"`, `</section>`))
	}
	day := tb.get(t, "/queues/q?span=24h")
	if day.status != http.StatusOK || !strings.Contains(day.body, `<span class="total">12 in the last 24 hours</span>`) {
		t.Fatalf("24h page: %d, want 12 handled in the last 24 hours:\n%s", day.status, between(day.body, `id="spans"`, `</section>`))
	}
	for _, want := range []string{"Jobs handled per 15 minutes", "max 1m30s", `<strong>in the last 24 hours</strong>`, `<a href="?span=1h">in the last hour</a>`} {
		if !strings.Contains(day.body, want) {
			t.Errorf("24h page does not say %q", want)
		}
	}
	// 96 quarter hours, each with its tooltip column.
	charts := between(day.body, `id="spans"`, `</section>`)
	if n := strings.Count(charts, `class="hover"`); n != 2*96 {
		t.Errorf("24h charts have %d columns, want 96 per chart", n/2)
	}
	if n := strings.Count(between(hour.body, `id="spans"`, `</section>`), `class="hover"`); n != 2*60 {
		t.Errorf("1h charts have %d columns, want 60 per chart", n/2)
	}
	bad := tb.get(t, "/queues/q?span=7d")
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.body, `Bad chart span &#34;7d&#34;: it is 1h or 24h`) {
		t.Errorf("?span=7d: %d\n%s", bad.status, bad.body)
	}
}

// between is the part of s from the first from to the next to after it.
func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	j := strings.Index(s[i:], to)
	if j < 0 {
		return s[i:]
	}
	return s[i : i+j]
}
