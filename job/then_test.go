package job_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/job"
)

type hop struct {
	N int `json:"n"`
}

var (
	hopA = job.New[hop]("hop.a")
	hopB = job.New[hop]("hop.b", job.Queue("other"), job.MaxRetries(2))
)

// Next jobs survive the stored form: their queue, id, delay or ready time,
// options and their own next jobs, and a job body ends as before, with the
// expiry mark last for the claim script.
func TestThenRoundTrips(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_900_000_000_000)
	inner, err := hopA.Envelope(hop{N: 3}, job.At(at))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hopB.Envelope(hop{N: 2}, job.ID("b-2"), job.In(1500*time.Microsecond), job.Header("k", "v"), job.Then(inner))
	if err != nil {
		t.Fatal(err)
	}
	parent, err := hopA.Envelope(hop{N: 1}, job.Then(b), job.ExpireIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	data, err := parent.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data[len(data)-20:]), `"x":"`) {
		t.Fatalf("the body does not end with its expiry: %s", data)
	}
	got, err := job.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Next) != 1 {
		t.Fatalf("next jobs %d, want 1: %s", len(got.Next), data)
	}
	n := got.Next[0]
	if n.ID != "b-2" || n.Queue != "other" || n.Type != "hop.b" || n.MaxRetries != 2 || n.Delay != 1500*time.Microsecond ||
		string(n.Payload) != `{"n":2}` || n.Headers["k"] != "v" {
		t.Fatalf("next job %+v", n)
	}
	if len(n.Next) != 1 || n.Next[0].Type != "hop.a" || !n.Next[0].At.Equal(at) || n.Next[0].Queue != "default" {
		t.Fatalf("the next job's own next job %+v", n.Next)
	}
}

// Then and Next refuse what a chain cannot take, naming it, and Then
// copies what it is given.
func TestThenBadInput(t *testing.T) {
	t.Parallel()
	ok, err := hopB.Envelope(hop{})
	if err != nil {
		t.Fatal(err)
	}
	unique, _ := hopB.Envelope(hop{}, job.Unique(time.Minute))
	replace, _ := hopB.Envelope(hop{}, job.ID("r"), job.Replace())
	member := *ok
	member.Batch = "b1"
	badQueue := *ok
	badQueue.Queue = "no such queue!"
	tooMany := make([]*job.Envelope, job.MaxNext+1)
	for i := range tooMany {
		tooMany[i] = ok
	}
	for name, tc := range map[string]struct {
		next []*job.Envelope
		want string
	}{
		"nil":       {[]*job.Envelope{nil}, "nil envelope"},
		"unique":    {[]*job.Envelope{unique}, "Unique"},
		"replace":   {[]*job.Envelope{replace}, "Replace"},
		"batch":     {[]*job.Envelope{&member}, "batch"},
		"bad queue": {[]*job.Envelope{ok, &badQueue}, "next job 2"},
		"too many":  {tooMany, "more than"},
	} {
		_, err := hopA.Envelope(hop{}, job.Then(tc.next...))
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Then %s: %v; want ErrInvalid naming %q", name, err, tc.want)
		}
	}
	// A nested chain is checked too, when the parent is prepared.
	parent := &job.Envelope{Type: "hop.a", Next: []*job.Envelope{{Type: "hop.b", Next: []*job.Envelope{unique}}}}
	if err := job.Prepare(parent, time.Now()); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "Unique") {
		t.Errorf("prepare of a nested unique next job: %v", err)
	}

	env, err := hopA.Envelope(hop{}, job.Then(ok))
	if err != nil {
		t.Fatal(err)
	}
	ok.Queue = "changed"
	if env.Next[0].Queue != "other" {
		t.Errorf("Then kept the caller's envelope, not a copy: queue %q", env.Next[0].Queue)
	}
}

// job.Next collects next jobs in a handler's attempt, and only there.
func TestNextInAHandler(t *testing.T) {
	t.Parallel()
	env, err := hopB.Envelope(hop{N: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Next(context.Background(), env); !errors.Is(err, job.ErrNoAttempt) {
		t.Fatalf("Next outside a handler: %v, want ErrNoAttempt", err)
	}
	ctx, a := job.WithAttempt(context.Background(), nil)
	if err := job.Next(ctx, env, env); err != nil {
		t.Fatal(err)
	}
	if err := job.Next(ctx, nil); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("Next(nil): %v, want ErrInvalid", err)
	}
	many := make([]*job.Envelope, job.MaxNext-1)
	for i := range many {
		many[i] = env
	}
	if err := job.Next(ctx, many...); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("Next past MaxNext: %v, want ErrInvalid", err)
	}
	if got := a.Next(); len(got) != 2 || got[0].Type != "hop.b" || got == nil {
		t.Fatalf("attempt's next jobs %v", got)
	}
}
