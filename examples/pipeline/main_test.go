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
// checking its type, id and flow-control key (the record's customer).
func handedOn[T any](t *testing.T, res *delayqtest.Result, step *job.Type[T], id, customer string) T {
	t.Helper()
	res.RequireSuccess(t)
	if len(res.Next) != 1 {
		t.Fatalf("%d next steps, want one", len(res.Next))
	}
	next := res.Next[0]
	if next.Type != step.Name() || next.ID != id || next.Queue != step.Queue() || next.Key != customer {
		t.Fatalf("next step %s %q in queue %q with key %q, want %s %q in %q with key %q", next.Type, next.ID, next.Queue, next.Key, step.Name(), id, step.Queue(), customer)
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
	raw := handedOn(t, step(t, rn, Fetch, FetchArgs{Customer: "bakery", Record: "rec-1"}), Transform, "transform-rec-1", "bakery")
	if want := (Raw{Customer: "bakery", Record: "rec-1", Name: "kettle", Price: "24.90"}); raw != want {
		t.Fatalf("handed %+v to transform, want %+v", raw, want)
	}
	product := handedOn(t, step(t, rn, Transform, raw), Store, "store-rec-1", "bakery")
	if want := (Product{Customer: "bakery", Record: "rec-1", Name: "kettle", Cents: 2490}); product != want {
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
	results, err := delayqtest.RunAll(t.Context(), rn, Fetch, FetchArgs{Customer: "bakery", Record: "rec-3"})
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
	handedOn(t, results[1], Transform, "transform-rec-3", "bakery")
}

// A poison record is dead at once and hands nothing on, until a person
// enters a correction; a record the source does not have is dead too.
func TestPoisonIsDeadUntilCorrected(t *testing.T) {
	t.Parallel()
	p, _, rn := setup(t, &Source{records: map[string]Raw{}})
	poison := Raw{Customer: "cafe", Record: "rec-4", Name: "mug", Price: "4,5O"}
	dead := step(t, rn, Transform, poison)
	dead.RequireDead(t, `price "4,5O" is not a number`)
	if len(dead.Next) != 0 {
		t.Fatalf("a dead step hands on %v", dead.Next)
	}

	p.correct("rec-4", "4.50")
	if got := handedOn(t, step(t, rn, Transform, poison), Store, "store-rec-4", "cafe"); got.Cents != 450 {
		t.Errorf("handed %+v to store, want 450 cents", got)
	}

	step(t, rn, Fetch, FetchArgs{Customer: "cafe", Record: "rec-9"}).RequireDead(t, "source has no such record")
}

// The whole run on a worker, under the per-customer caps: bakery's three
// records are all stored while acme's import still has records to store,
// no customer ever has more handlers of a step running at once than its
// cap (every handler counts those of its step and customer running with
// it), acme's own cap is used, and the run's other checks pass (report).
func TestCustomerCaps(t *testing.T) {
	t.Parallel()
	b := delayqtest.NewBroker(t, broker.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	p, err := runPipeline(ctx, b, demo.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if left, ok := p.backlog["bakery"]; !ok || left == 0 {
		t.Errorf("bakery's records were all stored with %d of acme's %d left (recorded %t): acme's import held them up", left, bulkRecords, ok)
	}
	if got := p.stored; got[bulk] != bulkRecords || got["bakery"] != 3 || got["cafe"] != 3 {
		t.Errorf("records stored by customer %v", got)
	}
	for _, q := range steps {
		for _, c := range []string{bulk, "bakery", "cafe"} {
			n := p.peak[q+" "+c]
			if n < 1 || n > capOf(c) {
				t.Errorf("%s of %s: %d handlers at once, want 1 to its cap %d", q, c, n, capOf(c))
			}
		}
	}
	if len(p.peak) != 3*len(steps) {
		t.Errorf("handlers counted for %v, want three customers in each step", p.peak)
	}
	if n := p.peak["fetch "+bulk]; n <= customerCap {
		t.Errorf("acme fetched at most %d at once: its own cap of %d was not used", n, bulkCap)
	}
	for sc, n := range p.running {
		if n != 0 {
			t.Errorf("%s: %d handlers still counted as running", sc, n)
		}
	}
}

// The batch's success and complete callbacks end the pipeline together;
// the complete callback tells of dead steps.
func TestBatchCallbacks(t *testing.T) {
	t.Parallel()
	p, b, rn := setup(t, &Source{})
	ctx := context.Background()
	callback := func(typ *job.Type[BatchArgs], id string) *delayqtest.Result {
		t.Helper()
		res, err := delayqtest.Run(ctx, rn, typ, BatchArgs{catalogue}, job.ID(id), job.Header("delayq-batch", catalogue))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if err := b.SealBatch(ctx, catalogue); err != nil {
		t.Fatal(err)
	}
	callback(CatalogueStored, catalogue+":success").RequireSuccess(t)
	select {
	case <-p.done:
		t.Fatal("done before both callbacks ran")
	default:
	}
	callback(CatalogueEnded, catalogue+":complete").RequireSuccess(t)
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
