package main

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
)

// setup returns a pipeline whose hand-offs go to a recording enqueuer, and
// a Runner with its three handlers.
func setup(t *testing.T, src *Source) (*Pipeline, *delayqtest.Enqueuer, *delayqtest.Runner) {
	t.Helper()
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	e := &delayqtest.Enqueuer{}
	p := &Pipeline{jobs: e, source: srv.URL, client: srv.Client(), clock: demo.NewClock(),
		warehouse: map[string]Product{}, finished: make(chan string, 16)}
	reg := job.NewRegistry()
	Fetch.Handle(reg, p.fetch)
	Transform.Handle(reg, p.transform)
	Store.Handle(reg, p.store)
	return p, e, &delayqtest.Runner{Registry: reg}
}

// Each step hands the record to the next, in its own queue, with an id
// derived from the record: run step by step from what was enqueued.
func TestStepsHandOff(t *testing.T) {
	p, e, rn := setup(t, &Source{records: map[string]Raw{"rec-1": {Name: "kettle", Price: "24.90"}}})
	ctx := t.Context()
	res, err := delayqtest.Run(ctx, rn, Fetch, FetchArgs{Record: "rec-1"})
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)
	raw := delayqtest.RequireEnqueued(t, e, Transform, delayqtest.HasID("transform-rec-1"), delayqtest.InQueue("transform"),
		delayqtest.HasArgs(Raw{Record: "rec-1", Name: "kettle", Price: "24.90"}))

	res, err = delayqtest.Run(ctx, rn, Transform, raw.Args)
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t)
	product := delayqtest.RequireEnqueued(t, e, Store, delayqtest.HasID("store-rec-1"), delayqtest.InQueue("store"),
		delayqtest.HasArgs(Product{Record: "rec-1", Name: "kettle", Cents: 2490}))

	// Storing twice (a redelivery) leaves one row.
	for range 2 {
		res, err = delayqtest.Run(ctx, rn, Store, product.Args)
		if err != nil {
			t.Fatal(err)
		}
		res.RequireSuccess(t)
	}
	if rows := p.rows(); len(rows) != 1 || rows[0].Cents != 2490 {
		t.Errorf("warehouse %+v", rows)
	}
}

// A source that answers 503 is retried with the steps' backoff (100ms
// ±20 %), then the record goes on; a fetch that runs again after it had
// handed off does not hand off twice.
func TestFetchRetriesAndHandsOffOnce(t *testing.T) {
	_, e, rn := setup(t, &Source{records: map[string]Raw{"rec-3": {Name: "teapot", Price: "18.50"}}, failures: map[string]int{"rec-3": 1}})
	results, err := delayqtest.RunAll(t.Context(), rn, Fetch, FetchArgs{Record: "rec-3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d attempts, want a 503 and a success: %v", len(results), results)
	}
	results[0].RequireRetry(t, 80*time.Millisecond, 120*time.Millisecond)
	results[1].RequireSuccess(t)

	res, err := delayqtest.Run(t.Context(), rn, Fetch, FetchArgs{Record: "rec-3"})
	if err != nil {
		t.Fatal(err)
	}
	res.RequireSuccess(t) // the duplicate hand-off counts as done
	delayqtest.RequireEnqueuedN(t, e, Transform, 1, delayqtest.HasID("transform-rec-3"))
}

// A poison record is dead at once and hands nothing on; a record the
// source does not have is dead too.
func TestPoisonAndMissingAreDead(t *testing.T) {
	_, e, rn := setup(t, &Source{records: map[string]Raw{}})
	res, err := delayqtest.Run(t.Context(), rn, Transform, Raw{Record: "rec-4", Name: "mug", Price: "4,5O"})
	if err != nil {
		t.Fatal(err)
	}
	res.RequireDead(t, `price "4,5O" is not a number`)
	delayqtest.RequireNotEnqueued(t, e, Store)

	res, err = delayqtest.Run(t.Context(), rn, Fetch, FetchArgs{Record: "rec-9"})
	if err != nil {
		t.Fatal(err)
	}
	res.RequireDead(t, "source has no such record")
}

func TestParsePrice(t *testing.T) {
	for in, want := range map[string]int64{"24.90": 2490, "1.2": 120, "7": 700, "0.05": 5} {
		if got, err := parsePrice(in); err != nil || got != want {
			t.Errorf("parsePrice(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"4,5O", "1.234", "", "-1"} {
		if _, err := parsePrice(in); err == nil {
			t.Errorf("parsePrice(%q) succeeded", in)
		}
	}
}
