package rules_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// The payload cap counts payload and headers together; 0 is the default
// cap and a negative option none.
func TestPrepareCap(t *testing.T) {
	t.Parallel()
	env := func() *job.Envelope {
		return &job.Envelope{Type: "t", Payload: []byte(`"12345678"`), Headers: map[string]string{"k": "v"}}
	}
	if err := rules.Prepare(env(), time.Now(), 12); err != nil {
		t.Fatalf("12 bytes under a cap of 12: %v", err)
	}
	err := rules.Prepare(env(), time.Now(), 11)
	if !errors.Is(err, rules.ErrPayloadTooLarge) || !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "12 bytes, the cap is 11") {
		t.Fatalf("12 bytes under a cap of 11: %v", err)
	}
	if got := rules.PayloadCap(0); got != rules.DefaultMaxPayloadBytes {
		t.Fatalf("PayloadCap(0) = %d", got)
	}
	if got := rules.PayloadCap(-1); got != 0 {
		t.Fatalf("PayloadCap(-1) = %d, want 0 (none)", got)
	}
	if err := rules.Prepare(nil, time.Now(), 0); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("nil envelope: %v", err)
	}
}

// Ready times round up to whole ms, and are at least 1.
func TestReadyMS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.UnixMilli(1000), 1000},
		{time.UnixMilli(1000).Add(time.Nanosecond), 1001},
		{time.UnixMilli(1000).Add(999 * time.Microsecond), 1001},
		{time.Unix(0, 0), 1},
	} {
		if got := rules.ReadyMS(c.t); got != c.want {
			t.Errorf("ReadyMS(%v) = %d, want %d", c.t, got, c.want)
		}
	}
	// From now: now's ms, rounded down (due at once), without a delay;
	// rounded up with one.
	now := time.UnixMilli(1000).Add(400 * time.Microsecond)
	if got := rules.ReadyAfter(now, 0); got != 1000 {
		t.Errorf("ReadyAfter(now, 0) = %d, want 1000", got)
	}
	if got := rules.ReadyAfter(now, time.Millisecond); got != 1002 {
		t.Errorf("ReadyAfter(now, 1ms) = %d, want 1002", got)
	}
}

// Next jobs get their chain ids and the default queue, copies of what was
// declared, and one the broker refuses fails them all, naming it.
func TestNextJobs(t *testing.T) {
	t.Parallel()
	created := time.UnixMilli(1_800_000_000_000)
	named := &job.Envelope{Type: "b", ID: "mine", Queue: "q"}
	anon := &job.Envelope{Type: "a"}
	out, err := rules.NextJobs("p", created, []*job.Envelope{anon, named}, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].ID != rules.ChainID("p", created, 1) || out[0].Queue != naming.DefaultQueue || out[1].ID != "mine" || out[1].Queue != "q" {
		t.Fatalf("next jobs %+v %+v", out[0], out[1])
	}
	if anon.ID != "" || anon.Queue != "" {
		t.Fatal("NextJobs changed the declared envelope")
	}
	big := &job.Envelope{Type: "c", Payload: []byte(`"` + strings.Repeat("x", 100) + `"`)}
	_, err = rules.NextJobs("p", created, []*job.Envelope{anon, big}, time.Now(), 50)
	if !errors.Is(err, rules.ErrPayloadTooLarge) || !strings.Contains(err.Error(), `next job 2 of job "p"`) {
		t.Fatalf("a next job over the cap: %v", err)
	}
	if _, err := rules.NextJobs("p", created, []*job.Envelope{nil}, time.Now(), 0); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("a nil next job: %v", err)
	}
}

// What an enqueue does, by what it finds: the table the broker's script
// and the test kit both follow.
func TestEnqueueTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		found           rules.Found
		unique, replace bool
		want            rules.Outcome
	}{
		{rules.Absent, false, false, rules.Stored},
		{rules.Scheduled, false, false, rules.Duplicate},
		{rules.Scheduled, false, true, rules.Replaced},
		{rules.Held, false, false, rules.Duplicate},
		{rules.Held, true, true, rules.InProgress},
		{rules.Remembered, false, false, rules.Stored},
		{rules.Remembered, true, false, rules.DuplicateEnded},
		{rules.EarlierInCall, false, true, rules.Duplicate},
	} {
		if got := rules.Enqueue(c.found, c.unique, c.replace); got != c.want {
			t.Errorf("Enqueue(%v, unique %v, replace %v) = %v, want %v", c.found, c.unique, c.replace, got, c.want)
		}
	}
	var dup *rules.DuplicateError
	if err := rules.EnqueueErr(rules.DuplicateEnded, "q", "a"); !errors.As(err, &dup) || !dup.Ended || !errors.Is(err, rules.ErrDuplicate) {
		t.Fatalf("DuplicateEnded: %v", err)
	}
	if err := rules.EnqueueErr(rules.InProgress, "q", "a"); !errors.Is(err, rules.ErrInProgress) {
		t.Fatalf("InProgress: %v", err)
	}
	if err := rules.Change(rules.Held, "q", "a"); !errors.Is(err, rules.ErrInProgress) {
		t.Fatalf("Change of a held job: %v", err)
	}
	if err := rules.Change(rules.Absent, "q", "a"); !errors.Is(err, rules.ErrNotFound) {
		t.Fatalf("Change of no job: %v", err)
	}
}

// What a debounced enqueue does, by what it finds before its call and what
// the jobs earlier in its call with the id left: the table of
// docs/flow-control.md#debounce, which the broker's script and the test
// kit both follow.
func TestDebounceTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		found   rules.Found
		earlier rules.Earlier
		want    rules.Outcome
	}{
		{rules.Absent, rules.NoneEarlier, rules.Stored},
		{rules.Remembered, rules.NoneEarlier, rules.Stored},
		{rules.Scheduled, rules.NoneEarlier, rules.Replaced},
		{rules.Due, rules.NoneEarlier, rules.Kept},
		{rules.Held, rules.NoneEarlier, rules.InProgress},
		{rules.Absent, rules.EarlierStored, rules.Replaced},
		{rules.Due, rules.EarlierStored, rules.Replaced},
		{rules.Scheduled, rules.EarlierKept, rules.Kept},
		{rules.Due, rules.EarlierKept, rules.Kept},
		{rules.Held, rules.EarlierRefused, rules.InProgress},
		{rules.Scheduled, rules.EarlierRefused, rules.Replaced},
		{rules.Due, rules.EarlierRefused, rules.Kept},
		{rules.Remembered, rules.EarlierRefused, rules.Duplicate},
	} {
		if got := rules.Debounce(c.found, c.earlier); got != c.want {
			t.Errorf("Debounce(%v, %v) = %v, want %v", c.found, c.earlier, got, c.want)
		}
	}
	// What earlier jobs leave: the last to write counts; refusals after a
	// write change nothing.
	for _, c := range []struct {
		outcomes []rules.Outcome
		want     rules.Earlier
	}{
		{nil, rules.NoneEarlier},
		{[]rules.Outcome{rules.Stored}, rules.EarlierStored},
		{[]rules.Outcome{rules.Kept, rules.Duplicate}, rules.EarlierKept},
		{[]rules.Outcome{rules.Kept, rules.Replaced}, rules.EarlierStored},
		{[]rules.Outcome{rules.Replaced, rules.Kept}, rules.EarlierKept},
		{[]rules.Outcome{rules.DuplicateEnded, rules.Duplicate}, rules.EarlierRefused},
		{[]rules.Outcome{rules.InProgress}, rules.EarlierRefused},
	} {
		e := rules.NoneEarlier
		for _, o := range c.outcomes {
			e = e.After(o)
		}
		if e != c.want {
			t.Errorf("after %v: %v, want %v", c.outcomes, e, c.want)
		}
	}
	// A due job is scheduled to everything but a debounced enqueue.
	if got := rules.Enqueue(rules.Due, false, true); got != rules.Replaced {
		t.Errorf("Enqueue(Due, replace) = %v, want Replaced", got)
	}
	if got := rules.Enqueue(rules.Due, false, false); got != rules.Duplicate {
		t.Errorf("Enqueue(Due) = %v, want Duplicate", got)
	}
	if err := rules.Change(rules.Due, "q", "a"); err != nil {
		t.Errorf("Change of a due job: %v", err)
	}
	if err := rules.EnqueueErr(rules.Kept, "q", "a"); err != nil {
		t.Errorf("EnqueueErr(Kept) = %v, want nil", err)
	}
}

// ChainID tells the next jobs of two jobs enqueued under one id apart, and
// stays a valid id for the longest parent ids.
func TestChainID(t *testing.T) {
	t.Parallel()
	created := time.UnixMilli(1_800_000_000_000)
	a, b := rules.ChainID("order-1", created, 1), rules.ChainID("order-1", created.Add(time.Millisecond), 1)
	if a == b || a == rules.ChainID("order-1", created, 2) {
		t.Fatalf("ids collide: %q %q", a, b)
	}
	if !strings.HasPrefix(a, "order-1>1@") {
		t.Fatalf("id %q does not name its parent", a)
	}
	long := rules.ChainID(strings.Repeat("x", naming.MaxIDLen), created, 1)
	if err := naming.ID(long); err != nil {
		t.Fatalf("id of a long parent: %v", err)
	}
}
