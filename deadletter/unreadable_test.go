package deadletter_test

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/keyspace"
)

// TestListLeavesOutUnreadableQueues: listing every queue, a queue whose
// dead-letter index another program overwrote with a string, and one whose
// shard count is not a number, are left out and named in Page.Skipped; the
// other queues' records are listed. Listing one of them alone fails.
func TestListLeavesOutUnreadableQueues(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.kill(t, true, dead{"good", "g1", "t", "boom"}, dead{"bad", "b1", "t", "boom"}, dead{"good", "g2", "t", "boom"})
	index := tb.key("bad", "dead:index")
	if err := tb.rdb.Set(tb.ctx, index, "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	tb.rdb.HSet(tb.ctx, keyspace.ShardsKey(tb.ns), "badcount", "many")
	tb.rdb.SAdd(tb.ctx, keyspace.QueuesKey(tb.ns), "badcount")
	page, err := tb.in.List(tb.ctx, "", deadletter.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 2 || page.Records[0].ID != "g2" || page.Records[1].ID != "g1" {
		t.Fatalf("records %v; want good's two", page.Records)
	}
	if len(page.Skipped) != 2 || !strings.Contains(page.Skipped["bad"].Error(), index) || !strings.Contains(page.Skipped["badcount"].Error(), "not a number") {
		t.Fatalf("skipped %v; want bad (naming %s) and badcount", page.Skipped, index)
	}
	if _, err := tb.in.List(tb.ctx, "bad", deadletter.ListOptions{}); err == nil || !strings.Contains(err.Error(), index) {
		t.Fatalf("listing the broken queue alone: %v; want an error naming %s", err, index)
	}
	// Nothing readable at all is an error, not an empty page.
	tb.rdb.Del(tb.ctx, tb.key("good", "dead:index"))
	tb.rdb.Set(tb.ctx, tb.key("good", "dead:index"), "garbage", 0)
	if page, err := tb.in.List(tb.ctx, "", deadletter.ListOptions{}); err == nil || len(page.Records) != 0 {
		t.Fatalf("every queue unreadable: %+v, %v; want an error", page, err)
	}
}
