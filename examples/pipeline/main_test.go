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

// setup returns a pipeline on a broker of the test's own whose transform
// and store stages are open batches, and a Runner with its handlers.
func setup(t *testing.T, src *Source) (*Pipeline, *broker.Broker, *delayqtest.Runner) {
	t.Helper()
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	b := delayqtest.NewBroker(t, broker.Options{})
	for _, id := range []string{"transform", "store"} {
		if _, err := b.CreateBatch(t.Context(), broker.BatchSpec{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	p := newPipeline(b, srv.URL, srv.Client(), demo.NewClock())
	reg := job.NewRegistry()
	p.register(reg)
	return p, b, &delayqtest.Runner{Registry: reg}
}

// handedOff returns the pending job id of queue, decoded, and checks that
// it is the only member of the queue's stage.
func handedOff[T any](t *testing.T, b *broker.Broker, step *job.Type[T], id string) T {
	t.Helper()
	ctx := t.Context()
	st, err := b.Batch(ctx, step.Queue())
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != 1 || st.Pending != 1 {
		t.Fatalf("stage %s: %+v, want one pending member", step.Queue(), *st)
	}
	info, err := b.Job(ctx, step.Queue(), id)
	if err != nil {
		t.Fatalf("the hand-off %s: %v", id, err)
	}
	if info.State != job.StateScheduled || info.Envelope.Batch != step.Queue() {
		t.Fatalf("%s is %s in batch %q, want scheduled in batch %q", id, info.State, info.Envelope.Batch, step.Queue())
	}
	args, err := delayqtest.Decode(step, info.Envelope)
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

// Each step adds the record to the next stage, in its own queue, with an
// id derived from the record: run step by step from what was handed off.
func TestStepsHandOff(t *testing.T) {
	t.Parallel()
	p, b, rn := setup(t, &Source{records: map[string]Raw{"rec-1": {Name: "kettle", Price: "24.90"}}})
	step(t, rn, Fetch, FetchArgs{Record: "rec-1"}).RequireSuccess(t)
	raw := handedOff(t, b, Transform, "transform-rec-1")
	if want := (Raw{Record: "rec-1", Name: "kettle", Price: "24.90"}); raw != want {
		t.Fatalf("handed %+v to transform, want %+v", raw, want)
	}
	step(t, rn, Transform, raw).RequireSuccess(t)
	product := handedOff(t, b, Store, "store-rec-1")
	if want := (Product{Record: "rec-1", Name: "kettle", Cents: 2490}); product != want {
		t.Fatalf("handed %+v to store, want %+v", product, want)
	}
	// Storing twice (a redelivery) leaves one row.
	for range 2 {
		step(t, rn, Store, product).RequireSuccess(t)
	}
	if rows := p.rows(); !reflect.DeepEqual(rows, []Product{product}) {
		t.Errorf("warehouse %+v", rows)
	}
}

// A source that answers 503 is retried with the steps' backoff (100ms
// ±20 %), then the record goes on; a fetch that runs again after it had
// handed off does not add the record to the next stage twice.
func TestFetchRetriesAndHandsOffOnce(t *testing.T) {
	t.Parallel()
	_, b, rn := setup(t, &Source{records: map[string]Raw{"rec-3": {Name: "teapot", Price: "18.50"}}, failures: map[string]int{"rec-3": 1}})
	results, err := delayqtest.RunAll(t.Context(), rn, Fetch, FetchArgs{Record: "rec-3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d attempts, want a 503 and a success: %v", len(results), results)
	}
	results[0].RequireRetry(t, 80*time.Millisecond, 120*time.Millisecond)
	results[1].RequireSuccess(t)

	step(t, rn, Fetch, FetchArgs{Record: "rec-3"}).RequireSuccess(t) // the repeated hand-off counts as done
	handedOff(t, b, Transform, "transform-rec-3")
}

// A poison record is dead at once and hands nothing on, until a person
// enters a correction; a record the source does not have is dead too.
func TestPoisonIsDeadUntilCorrected(t *testing.T) {
	t.Parallel()
	p, b, rn := setup(t, &Source{records: map[string]Raw{}})
	poison := Raw{Record: "rec-4", Name: "mug", Price: "4,5O"}
	step(t, rn, Transform, poison).RequireDead(t, `price "4,5O" is not a number`)
	if st, err := b.Batch(t.Context(), "store"); err != nil || st.Total != 0 {
		t.Fatalf("store stage %+v, %v; want no member", st, err)
	}

	p.correct("rec-4", "4.50")
	step(t, rn, Transform, poison).RequireSuccess(t)
	if got := handedOff(t, b, Store, "store-rec-4"); got.Cents != 450 {
		t.Errorf("handed %+v to store, want 450 cents", got)
	}

	step(t, rn, Fetch, FetchArgs{Record: "rec-9"}).RequireDead(t, "source has no such record")
}

// A stage's success callback seals the next stage; the last one's, with
// its complete callback, ends the pipeline. The complete callback tells
// of dead members.
func TestStageCallbacks(t *testing.T) {
	t.Parallel()
	p, b, rn := setup(t, &Source{})
	ctx := context.Background()
	callback := func(typ *job.Type[StageArgs], s StageArgs, id string) *delayqtest.Result {
		t.Helper()
		res, err := delayqtest.Run(ctx, rn, typ, s, job.ID(id), job.Header(broker.BatchHeader, s.Stage))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	callback(StageSucceeded, stages[1], broker.SuccessID("transform")).RequireSuccess(t)
	if st, _ := b.Batch(ctx, "store"); !st.Sealed || !st.Complete() {
		t.Fatalf("store stage %+v after transform succeeded, want sealed (and complete, being empty)", st)
	}
	select {
	case <-p.done:
		t.Fatal("done before the last stage's callbacks ran")
	default:
	}
	callback(StageSucceeded, stages[2], broker.SuccessID("store")).RequireSuccess(t)
	callback(StageEnded, stages[2], broker.CompleteID("store")).RequireSuccess(t)
	select {
	case <-p.done:
	default:
		t.Fatal("not done after both callbacks of the last stage ran")
	}
	if len(p.parked) != 0 {
		t.Errorf("a stage with no dead member was reported parked")
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
