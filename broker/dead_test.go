package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestDeadPageSameMillisecond pages through records that mostly share their
// died-at millisecond, so that most cursors fall inside a run of equal
// scores.
func TestDeadPageSameMillisecond(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const n = 230
	envs := make([]*job.Envelope, n)
	for i := range envs {
		envs[i] = env(fmt.Sprintf("j%03d", i), 0)
	}
	tb.enqueue(t, envs...)
	res := tb.claim(t, n)
	for i, c := range res.Jobs {
		if i == n-10 {
			tb.clock.Advance(time.Millisecond) // the last ten die a millisecond later
		}
		if _, err := testkit.Drive(tb.b).Kill(tb.ctx, c.Lease, &job.DeadRecord{Error: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{1, 3, 50, 229, 230, 1000} {
		var cur protocol.DeadCursor
		var got []string
		for {
			recs, next, err := protocol.Dead(tb.b).Page(tb.ctx, "q", cur, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) > limit || (len(recs) < limit && !next.IsZero()) {
				t.Fatalf("limit %d: page of %d records, next %v", limit, len(recs), next)
			}
			for _, r := range recs {
				got = append(got, r.ID)
			}
			if next.IsZero() {
				break
			}
			cur = next
		}
		if len(got) != n {
			t.Fatalf("limit %d: paged %d records, want %d", limit, len(got), n)
		}
		// Newest first (j220…j229 died last); within a millisecond by id,
		// descending.
		for i, id := range got {
			want := fmt.Sprintf("j%03d", n-1-i)
			if id != want {
				t.Fatalf("limit %d: record %d is %s, want %s", limit, i, id, want)
			}
		}
	}
}
