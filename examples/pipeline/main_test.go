package main

import (
	"context"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/delayqtest"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
)

// setup returns a pipeline on a broker of the test's own holding an open
// batch catalogue, and a Runner with its handlers.
func setup(t *testing.T, src *Source) (*Pipeline, *broker.Broker, *delayqtest.Runner) {
	t.Helper()
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	b := delayqtest.NewBroker(t, broker.Options{})
	if _, err := b.CreateBatch(t.Context(), broker.BatchSpec{ID: catalogue}); err != nil {
		t.Fatal(err)
	}
	p := newPipeline(b, srv.URL, srv.Client(), demo.NewClock())
	reg := job.NewRegistry()
	p.register(reg)
	return p, b, &delayqtest.Runner{Registry: reg}
}

// handedOn returns the arguments of the one next step res declares,
// checking its type and id.
func handedOn[T any](t *testing.T, res *delayqtest.Result, step *job.Type[T], id string) T {
	t.Helper()
	res.RequireSuccess(t)
	if len(res.Next) != 1 {
		t.Fatalf("%d next steps, want one", len(res.Next))
	}
	next := res.Next[0]
	if next.Type != step.Name() || next.ID != id || next.Queue != step.Queue() {
		t.Fatalf("next step %s %q in queue %q, want %s %q in %q", next.Type, next.ID, next.Queue, step.Name(), id, step.Queue())
	}
	args, err := delayqtest.Decode(step, next)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

func step[T any](t *testing.T, rn *delayqtest.Runner, typ *job.Type[T], args T) *delayqtest.Result {
	t.Helper()
	res, err := delayqtest.Run(t.Context(), rn, typ, args)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Each step hands its record on to the next step, in its own queue, with
// an id derived from the record: run step by step from what was handed on.
func TestStepsHandOn(t *testing.T) {
	t.Parallel()
	p, _, rn := setup(t, &Source{records: map[string]Raw{"rec-1": {Name: "kettle", Price: "24.90"}}})
	raw := handedOn(t, step(t, rn, Fetch, FetchArgs{Record: "rec-1"}), Transform, "transform-rec-1")
	if want := (Raw{Record: "rec-1", Name: "kettle", Price: "24.90"}); raw != want {
		t.Fatalf("handed %+v to transform, want %+v", raw, want)
	}
	product := handedOn(t, step(t, rn, Transform, raw), Store, "store-rec-1")
	if want := (Product{Record: "rec-1", Name: "kettle", Cents: 2490}); product != want {
		t.Fatalf("handed %+v to store, want %+v", product, want)
	}
	// Storing twice (a redelivery) leaves one row, and hands nothing on.
	for range 2 {
		res := step(t, rn, Store, product)
		res.RequireSuccess(t)
		if len(res.Next) != 0 {
			t.Fatalf("store hands on %v", res.Next)
		}
	}
	if rows := p.rows(); !reflect.DeepEqual(rows, []Product{product}) {
		t.Errorf("warehouse %+v", rows)
	}
}

// A source that answers 503 is retried with the steps' backoff (100ms
// ±20 %), then the record goes on; the failed attempt hands nothing on.
func TestFetchRetriesThenHandsOn(t *testing.T) {
	t.Parallel()
	_, _, rn := setup(t, &Source{records: map[string]Raw{"rec-3": {Name: "teapot", Price: "18.50"}}, failures: map[string]int{"rec-3": 1}})
	results, err := delayqtest.RunAll(t.Context(), rn, Fetch, FetchArgs{Record: "rec-3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d attempts, want a 503 and a success: %v", len(results), results)
	}
	results[0].RequireRetry(t, 80*time.Millisecond, 120*time.Millisecond)
	if len(results[0].Next) != 0 {
		t.Fatalf("a failed fetch hands on %v", results[0].Next)
	}
	handedOn(t, results[1], Transform, "transform-rec-3")
}

// A poison record is dead at once and hands nothing on, until a person
// enters a correction; a record the source does not have is dead too.
func TestPoisonIsDeadUntilCorrected(t *testing.T) {
	t.Parallel()
	p, _, rn := setup(t, &Source{records: map[string]Raw{}})
	poison := Raw{Record: "rec-4", Name: "mug", Price: "4,5O"}
	dead := step(t, rn, Transform, poison)
	dead.RequireDead(t, `price "4,5O" is not a number`)
	if len(dead.Next) != 0 {
		t.Fatalf("a dead step hands on %v", dead.Next)
	}

	p.correct("rec-4", "4.50")
	if got := handedOn(t, step(t, rn, Transform, poison), Store, "store-rec-4"); got.Cents != 450 {
		t.Errorf("handed %+v to store, want 450 cents", got)
	}

	step(t, rn, Fetch, FetchArgs{Record: "rec-9"}).RequireDead(t, "source has no such record")
}

// The batch's success and complete callbacks end the pipeline together;
// the complete callback tells of dead steps.
func TestBatchCallbacks(t *testing.T) {
	t.Parallel()
	p, b, rn := setup(t, &Source{})
	ctx := context.Background()
	callback := func(typ *job.Type[BatchArgs], id string) *delayqtest.Result {
		t.Helper()
		res, err := delayqtest.Run(ctx, rn, typ, BatchArgs{catalogue}, job.ID(id), job.Header(broker.BatchHeader, catalogue))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if err := b.SealBatch(ctx, catalogue); err != nil {
		t.Fatal(err)
	}
	callback(CatalogueStored, broker.SuccessID(catalogue)).RequireSuccess(t)
	select {
	case <-p.done:
		t.Fatal("done before both callbacks ran")
	default:
	}
	callback(CatalogueEnded, broker.CompleteID(catalogue)).RequireSuccess(t)
	select {
	case <-p.done:
	default:
		t.Fatal("not done after both callbacks ran")
	}
	if len(p.parked) != 0 {
		t.Errorf("a batch with no dead step was reported parked")
	}
}

func TestParsePrice(t *testing.T) {
	t.Parallel()
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
