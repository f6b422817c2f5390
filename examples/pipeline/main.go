// Command pipeline runs records through three steps — fetch, transform,
// store — each a job type on its own queue, each handing the record to the
// next. One worker serves the three queues by weight, favouring the steps
// nearer the end so that records already under way finish first.
//
// Each step is a stage, and each stage is a batch of that step's jobs
// (broker.CreateBatch). Nothing polls to learn how far the records got: a
// stage's callback jobs say it.
//
//   - Its success callback runs once every member succeeded. Then no more
//     records can reach the next stage, so the callback seals the next
//     stage's batch; after the last stage the pipeline is done.
//   - Its complete callback runs once every member ended, succeeded or
//     dead. With a member dead, the success callback waits: the record is
//     parked in the dead letters for a person, and the stages after it
//     stay open for it.
//
// The run shows:
//
//   - a fetch that fails transiently (the source answers 503 twice) is
//     retried with backoff and goes on;
//   - a poison record (a price that does not parse) fails permanently in
//     transform and parks in the dead letters with its error; the
//     transform stage ends (complete callback) but does not succeed;
//   - a person corrects the price and redrives the dead job: it succeeds,
//     which moves it from dead to succeeded in its batch, so the transform
//     stage succeeds after all, the store stage is sealed and every record
//     is stored.
//
// Each hand-off adds the next step to its stage with a job id derived from
// the record ("transform-rec-3") before the step is acknowledged, so a
// stage cannot succeed while a hand-off of it is missing. A step that runs
// twice (at-least-once) adds the same member again, which its batch counts
// once; the store step is an upsert, so storing a record twice leaves one
// row.
//
//	go run ./examples/pipeline                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/pipeline
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

// Payloads of the three steps.
type (
	// FetchArgs names a record at the source.
	FetchArgs struct {
		Record string `json:"record"`
	}
	// Raw is a record as the source serves it.
	Raw struct {
		Record string `json:"record"`
		Name   string `json:"name"`
		Price  string `json:"price"` // "12.50"
	}
	// Product is a record ready to store.
	Product struct {
		Record string `json:"record"`
		Name   string `json:"name"`
		Cents  int64  `json:"cents"`
	}
)

// fast is the backoff of every step: 100ms, 200ms, 400ms, … ±20 %.
var fast = job.Retry(retry.Exponential{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second, Jitter: 0.2})

// The three steps, one queue each. A stage's batch has the id of its
// step's queue.
var (
	Fetch     = job.New[FetchArgs]("pipeline.fetch", job.Queue("fetch"), job.MaxRetries(5), fast)
	Transform = job.New[Raw]("pipeline.transform", job.Queue("transform"), job.MaxRetries(5), fast)
	Store     = job.New[Product]("pipeline.store", job.Queue("store"), job.MaxRetries(5), fast)
)

// StageArgs names a stage and the stage after it ("" after the last).
type StageArgs struct {
	Stage string `json:"stage"`
	Next  string `json:"next"`
}

// The callbacks of every stage's batch.
var (
	StageSucceeded = job.New[StageArgs]("pipeline.stage_succeeded", job.Queue("stages"))
	StageEnded     = job.New[StageArgs]("pipeline.stage_ended", job.Queue("stages"))
)

var stages = []StageArgs{{"fetch", "transform"}, {"transform", "store"}, {"store", ""}}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rdb, where, closeRedis, err := demo.Redis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()
	b, err := broker.New(rdb, broker.Options{Namespace: "pipeline-" + job.NewID()})
	if err != nil {
		return err
	}
	clock := demo.NewClock()
	clock.Printf("using %s", where)

	// The source: rec-3 answers 503 twice before it serves the record;
	// rec-4's price is garbage.
	source := &Source{records: map[string]Raw{
		"rec-1": {Name: "kettle", Price: "24.90"},
		"rec-2": {Name: "toaster", Price: "39.00"},
		"rec-3": {Name: "teapot", Price: "18.50"},
		"rec-4": {Name: "mug", Price: "4,5O"},
		"rec-5": {Name: "spoon", Price: "1.20"},
		"rec-6": {Name: "tray", Price: "12.00"},
	}, failures: map[string]int{"rec-3": 2}}
	srv := httptest.NewServer(source)
	defer srv.Close()

	p := newPipeline(b, srv.URL, srv.Client(), clock)
	reg := job.NewRegistry()
	p.register(reg)
	w, err := worker.New(worker.Config{
		Broker:   b,
		Registry: reg,
		Queues: []worker.Queue{{Name: "fetch", Weight: 1}, {Name: "transform", Weight: 2}, {Name: "store", Weight: 3},
			{Name: "stages", Weight: 3}},
	})
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	// One batch per stage, all open; the fetches go in, and the fetch
	// stage is sealed: it is the only one whose members are all known.
	for _, s := range stages {
		ok, err := StageSucceeded.Envelope(s)
		if err != nil {
			return err
		}
		ended, err := StageEnded.Envelope(s)
		if err != nil {
			return err
		}
		// The demo's records need not outlive it by the default week.
		if _, err := b.CreateBatch(ctx, broker.BatchSpec{ID: s.Stage, OnSuccess: ok, OnComplete: ended, Keep: time.Hour}); err != nil {
			return err
		}
	}
	records := []string{"rec-1", "rec-2", "rec-3", "rec-4", "rec-5", "rec-6"}
	fetches := make([]*job.Envelope, len(records))
	for i, r := range records {
		if fetches[i], err = Fetch.Envelope(FetchArgs{r}, job.ID("fetch-"+r)); err != nil {
			return err
		}
	}
	if err := b.AddToBatch(ctx, "fetch", fetches...); err != nil {
		return err
	}
	if err := b.SealBatch(ctx, "fetch"); err != nil {
		return err
	}
	clock.Printf("batch fetch: %d fetches added in one call, sealed; transform and store stay open", len(fetches))

	// A stage ended with a member dead: that is the person's cue.
	var parked string
	select {
	case parked = <-p.parked:
	case <-p.done:
		return errors.New("the pipeline succeeded with the poison record in it")
	case <-ctx.Done():
		return fmt.Errorf("timed out before a stage ended with a dead member: %s", p.statuses(context.Background()))
	}
	dead := deadletter.New(b)
	page, err := dead.List(ctx, parked, deadletter.ListOptions{})
	if err != nil {
		return err
	}
	if len(page.Records) != 1 || page.Records[0].ID != "transform-rec-4" {
		return fmt.Errorf("stage %s parked %d jobs, want transform-rec-4 alone", parked, len(page.Records))
	}
	r := page.Records[0]
	clock.Printf("parked for a person: %s in queue %s after %d attempt(s): %s", r.ID, r.Queue, r.Attempts, r.Error)

	// The person fixes the cause, then redrives the very job.
	p.correct("rec-4", "4.50")
	clock.Printf("a person corrects rec-4's price to 4.50 and redrives %s", r.ID)
	if err := dead.Redrive(ctx, r.Queue, 0, r.ID); err != nil {
		return err
	}

	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("timed out after the redrive: %s", p.statuses(context.Background()))
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return err
	}
	return p.report(context.Background(), records)
}

// report prints the warehouse and the stages, and checks them: every record
// stored with its price, every stage's members succeeded, each callback
// run once, the transform stage ended once with the poison record dead.
func (p *Pipeline) report(ctx context.Context, records []string) error {
	rows := p.rows()
	p.clock.Printf("stored %d of %d records:", len(rows), len(records))
	want := map[string]int64{"rec-1": 2490, "rec-2": 3900, "rec-3": 1850, "rec-4": 450, "rec-5": 120, "rec-6": 1200}
	var problems []string
	for _, r := range rows {
		p.clock.Printf("  %s %-8s %4d.%02d", r.Record, r.Name, r.Cents/100, r.Cents%100)
		if want[r.Record] != r.Cents {
			problems = append(problems, fmt.Sprintf("%s stored at %d cents, want %d", r.Record, r.Cents, want[r.Record]))
		}
	}
	if len(rows) != len(records) {
		problems = append(problems, fmt.Sprintf("%d records stored, want %d", len(rows), len(records)))
	}
	for _, s := range stages {
		st, err := p.broker.Batch(ctx, s.Stage)
		if err != nil {
			return err
		}
		p.clock.Printf("batch %-9s %d members: %d succeeded, %d dead; success callback fired %t, complete callback fired %t",
			s.Stage, st.Total, st.Succeeded, st.Dead, st.SuccessFired, st.CompleteFired)
		if st.Total != len(records) || st.Succeeded != st.Total || !st.SuccessFired || !st.CompleteFired {
			problems = append(problems, fmt.Sprintf("batch %s: %+v", s.Stage, *st))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range stages {
		for _, name := range []string{broker.SuccessID(s.Stage), broker.CompleteID(s.Stage)} {
			if n := p.callbacks[name]; n != 1 {
				problems = append(problems, fmt.Sprintf("callback %s ran %d times, want once", name, n))
			}
		}
	}
	if d := p.deadAtEnd["transform"]; d != 1 {
		problems = append(problems, fmt.Sprintf("the transform stage ended with %d dead, want 1", d))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	p.clock.Printf("all checks passed")
	return nil
}

// batcher adds members to a batch: the broker, or a stand-in in tests.
type batcher interface {
	AddToBatch(ctx context.Context, id string, members ...*job.Envelope) error
}

// Pipeline holds the handlers of the three steps and of the stages'
// callbacks.
type Pipeline struct {
	broker *broker.Broker // seals and reads the stages' batches
	jobs   batcher        // takes the hand-offs
	source string
	client *http.Client
	clock  *demo.Clock

	parked   chan string   // a stage that ended with members dead
	done     chan struct{} // closed when the last stage succeeded and both its callbacks ran
	doneOnce sync.Once

	mu          sync.Mutex
	warehouse   map[string]Product
	corrections map[string]string // record -> price, entered by a person
	callbacks   map[string]int    // callback job id -> runs
	deadAtEnd   map[string]int    // stage -> dead members when it ended
}

func newPipeline(b *broker.Broker, source string, client *http.Client, clock *demo.Clock) *Pipeline {
	p := &Pipeline{broker: b, source: source, client: client, clock: clock,
		parked: make(chan string, len(stages)), done: make(chan struct{}),
		warehouse: map[string]Product{}, corrections: map[string]string{},
		callbacks: map[string]int{}, deadAtEnd: map[string]int{}}
	if b != nil {
		p.jobs = b
	}
	return p
}

func (p *Pipeline) register(reg *job.Registry) {
	Fetch.Handle(reg, p.fetch)
	Transform.Handle(reg, p.transform)
	Store.Handle(reg, p.store)
	StageSucceeded.Handle(reg, p.stageSucceeded)
	StageEnded.Handle(reg, p.stageEnded)
}

// fetch downloads a record and hands it to transform.
func (p *Pipeline) fetch(ctx context.Context, j *job.Job[FetchArgs]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.source+"/records/"+j.Args.Record, nil)
	if err != nil {
		return retry.Permanent(err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return retry.Permanent(fmt.Errorf("fetch %s: source has no such record", j.Args.Record))
	case resp.StatusCode != http.StatusOK:
		p.clock.Printf("fetch     %s attempt %d failed: source answered %s; retrying with backoff", j.Args.Record, j.Attempt, resp.Status)
		return fmt.Errorf("fetch %s: source answered %s", j.Args.Record, resp.Status)
	}
	var raw Raw
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return fmt.Errorf("fetch %s: %w", j.Args.Record, err)
	}
	p.clock.Printf("fetch     %s attempt %d: ok", raw.Record, j.Attempt)
	return handOff(ctx, p.jobs, Transform, raw, "transform-"+raw.Record)
}

// transform parses the price, or the correction a person entered for it.
// A price that does not parse cannot be fixed by retrying: the record is
// dead-lettered at once, to wait for a person.
func (p *Pipeline) transform(ctx context.Context, j *job.Job[Raw]) error {
	price := j.Args.Price
	p.mu.Lock()
	fixed, ok := p.corrections[j.Args.Record]
	p.mu.Unlock()
	if ok {
		price = fixed
	}
	cents, err := parsePrice(price)
	if err != nil {
		p.clock.Printf("transform %s attempt %d: poison input, permanent: %v", j.Args.Record, j.Attempt, err)
		return retry.Permanent(fmt.Errorf("transform %s: %w", j.Args.Record, err))
	}
	if ok {
		p.clock.Printf("transform %s attempt %d: %q corrected to %q -> %d cents", j.Args.Record, j.Attempt, j.Args.Price, price, cents)
	} else {
		p.clock.Printf("transform %s: %q -> %d cents", j.Args.Record, price, cents)
	}
	return handOff(ctx, p.jobs, Store, Product{Record: j.Args.Record, Name: j.Args.Name, Cents: cents}, "store-"+j.Args.Record)
}

// store upserts the product by record id, so storing it twice leaves one row.
func (p *Pipeline) store(ctx context.Context, j *job.Job[Product]) error {
	p.mu.Lock()
	p.warehouse[j.Args.Record] = j.Args
	p.mu.Unlock()
	p.clock.Printf("store     %s: upserted", j.Args.Record)
	return nil
}

// stageSucceeded runs once every member of a stage succeeded. Every
// record has then been handed to the next stage, so that batch is sealed:
// it succeeds in turn once those members have. A stage with a member dead
// does not get here until the member is redriven and succeeds, so the next
// stage stays open for its hand-off. Sealing twice (a callback run again)
// changes nothing.
func (p *Pipeline) stageSucceeded(ctx context.Context, j *job.Job[StageArgs]) error {
	st, err := p.stage(ctx, j)
	if err != nil {
		return err
	}
	p.clock.Printf("batch %-9s succeeded (success callback): %d of %d members", st.ID, st.Succeeded, st.Total)
	if j.Args.Next == "" {
		p.lastRan()
		return nil
	}
	if err := p.broker.SealBatch(ctx, j.Args.Next); err != nil {
		return err
	}
	p.clock.Printf("batch %-9s sealed: no more members can come", j.Args.Next)
	return nil
}

// stageEnded runs once every member of a stage ended, succeeded or dead.
// With none dead the success callback does the rest; with some, they wait
// in the dead letters, and the program is told.
func (p *Pipeline) stageEnded(ctx context.Context, j *job.Job[StageArgs]) error {
	st, err := p.stage(ctx, j)
	if err != nil {
		return err
	}
	p.clock.Printf("batch %-9s ended (complete callback): %d succeeded, %d dead", st.ID, st.Succeeded, st.Dead)
	p.mu.Lock()
	p.deadAtEnd[st.ID] = st.Dead
	p.mu.Unlock()
	if st.Dead > 0 {
		p.clock.Printf("batch %-9s does not succeed while a member is dead: %s waits for it", st.ID, j.Args.Next)
		select {
		case p.parked <- st.ID:
		default: // told already
		}
	}
	if j.Args.Next == "" {
		p.lastRan()
	}
	return nil
}

// lastRan closes done once both callbacks of the last stage ran: the
// worker may run them in either order, and the program checks both.
func (p *Pipeline) lastRan() {
	last := stages[len(stages)-1].Stage
	p.mu.Lock()
	both := p.callbacks[broker.SuccessID(last)] > 0 && p.callbacks[broker.CompleteID(last)] > 0
	p.mu.Unlock()
	if both {
		p.doneOnce.Do(func() { close(p.done) })
	}
}

// stage counts a callback's run and reads the batch it is about, named by
// the callback's batch header.
func (p *Pipeline) stage(ctx context.Context, j *job.Job[StageArgs]) (*broker.BatchStatus, error) {
	p.mu.Lock()
	p.callbacks[j.ID]++
	p.mu.Unlock()
	return p.broker.Batch(ctx, j.Headers[broker.BatchHeader])
}

// statuses describes the stages, for an error.
func (p *Pipeline) statuses(ctx context.Context) string {
	var out []string
	for _, s := range stages {
		st, err := p.broker.Batch(ctx, s.Stage)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		out = append(out, fmt.Sprintf("%s %+v", s.Stage, *st))
	}
	return strings.Join(out, "; ")
}

// correct records a person's correction of a record's price.
func (p *Pipeline) correct(record, price string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.corrections[record] = price
}

// handOff adds the next step of a record to that step's stage, with an id
// derived from the record. It runs before this step is acknowledged, so
// the next stage holds the record before this one can succeed and seal
// it. A step that runs again adds the same member again: the batch counts
// it once, and takes the job found pending as the one added before.
func handOff[T any](ctx context.Context, b batcher, step *job.Type[T], args T, id string) error {
	env, err := step.Envelope(args, job.ID(id))
	if err != nil {
		return err
	}
	return b.AddToBatch(ctx, step.Queue(), env)
}

func (p *Pipeline) rows() []Product {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Product, 0, len(p.warehouse))
	for _, r := range p.warehouse {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Record < out[j].Record })
	return out
}

// parsePrice turns "12.50" into 1250.
func parsePrice(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > 2 {
		return 0, fmt.Errorf("price %q has more than two decimals", s)
	}
	w, err := strconv.ParseUint(whole, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("price %q is not a number", s)
	}
	f, err := strconv.ParseUint(frac+strings.Repeat("0", 2-len(frac)), 10, 8)
	if err != nil {
		return 0, fmt.Errorf("price %q is not a number", s)
	}
	return int64(w)*100 + int64(f), nil
}

// Source serves records; some fail a number of times first.
type Source struct {
	mu       sync.Mutex
	records  map[string]Raw
	failures map[string]int // record -> 503s still to give
}

func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/records/")
	s.mu.Lock()
	rec, ok := s.records[id]
	fail := s.failures[id] > 0
	if fail {
		s.failures[id]--
	}
	s.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
	case fail:
		http.Error(w, "busy", http.StatusServiceUnavailable)
	default:
		rec.Record = id
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rec)
	}
}
