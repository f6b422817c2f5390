// Command pipeline runs records through three steps — fetch, transform,
// store — each a job type on its own queue. One worker serves the queues
// by weight, favouring the steps nearer the end so that records already
// under way finish first.
//
// Each record is a chain: a step that succeeds declares the next step of
// its record with job.Next, with the arguments it produced, and the worker
// enqueues it with the step's acknowledgement (docs/batches.md, "Chains").
// A step that fails hands nothing on.
//
// The records are one batch (broker.CreateBatch): the fetches are its
// members, and the next steps of a member join it, so the batch's callbacks
// say how far the records got. Nothing polls.
//
//   - Its success callback runs once every step of every record succeeded:
//     the pipeline is done.
//   - Its complete callback runs once every chain ended, some with a step
//     dead. The success callback then waits: the record is parked in the
//     dead letters for a person.
//
// The records come from three customers, and one customer's big import
// must not hold up another customer's three records. Each step's type
// takes its flow-control key from its arguments, the record's customer
// (job.KeyFrom, declared once on the type), and each step's queue caps
// how many records of one customer run at once (Broker.SetKeyConcurrency,
// docs/flow-control.md "Per-key caps"): one for every customer, three for
// acme, whose 60-record catalogue import comes from a slow bulk export.
// The worker has 8 slots, so acme's backlog never takes them all: bakery's
// records go through the three steps beside it, and all of bakery's are
// stored while acme's import is still being worked through. Every handler
// counts the handlers of its step and customer running with it, and the
// run checks that no customer ever ran more than its cap.
//
// The run shows:
//
//   - bakery's three records are all stored while acme still has records
//     to store, and no customer ran more records of a step at once than
//     its cap (one; acme three, which it reaches in fetch);
//   - a fetch that fails transiently (the source answers 503 twice) is
//     retried with backoff and goes on;
//   - a poison record (a price that does not parse) fails permanently in
//     transform and parks in the dead letters with its error; the batch
//     ends (complete callback) but does not succeed;
//   - a person corrects the price and redrives the dead step: it succeeds
//     and hands the record on to store, which joins the batch; once it is
//     stored, the batch succeeds.
//
// Each step's next step has an id derived from the record
// ("transform-rec-3"), so a step that runs twice (at-least-once) hands on
// the same job, which the broker enqueues once and the batch counts once;
// the store step is an upsert, so storing a record twice leaves one row.
//
//	go run ./examples/pipeline                 # embedded Redis
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/pipeline
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	// FetchArgs names a record at the source, and its customer.
	FetchArgs struct {
		Customer string `json:"customer"`
		Record   string `json:"record"`
	}
	// Raw is a record as the source serves it, with its customer.
	Raw struct {
		Customer string `json:"customer"`
		Record   string `json:"record"`
		Name     string `json:"name"`
		Price    string `json:"price"` // "12.50"
	}
	// Product is a record ready to store.
	Product struct {
		Customer string `json:"customer"`
		Record   string `json:"record"`
		Name     string `json:"name"`
		Cents    int64  `json:"cents"`
	}
)

// fast is the backoff of every step: 100ms, 200ms, 400ms, … ±20 %.
var fast = job.Retry(retry.Exponential{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second, Jitter: 0.2})

// The three steps, one queue each. A step's job carries its record's
// customer as its flow-control key, which the per-customer caps count.
var (
	Fetch = job.New[FetchArgs]("pipeline.fetch", job.Queue("fetch"), job.MaxRetries(5), fast,
		job.KeyFrom(func(a FetchArgs) string { return a.Customer }))
	Transform = job.New[Raw]("pipeline.transform", job.Queue("transform"), job.MaxRetries(5), fast,
		job.KeyFrom(func(a Raw) string { return a.Customer }))
	Store = job.New[Product]("pipeline.store", job.Queue("store"), job.MaxRetries(5), fast,
		job.KeyFrom(func(a Product) string { return a.Customer }))
)

// steps are the three steps' queues, each capped per customer.
var steps = []string{"fetch", "transform", "store"}

// The customers and their caps.
const (
	bulk        = "acme" // the customer with the big import
	bulkRecords = 60     // its records
	customerCap = 1      // records of one customer per step at once: every customer's default
	bulkCap     = 3      // acme's own cap, per step
	bulkLatency = 50 * time.Millisecond
)

// capOf is a customer's cap in every step.
func capOf(customer string) int {
	if customer == bulk {
		return bulkCap
	}
	return customerCap
}

// BatchArgs names the batch of the run's records.
type BatchArgs struct {
	Batch string `json:"batch"`
}

// The callbacks of the batch.
var (
	CatalogueStored = job.New[BatchArgs]("pipeline.catalogue_stored", job.Queue("callbacks"))
	CatalogueEnded  = job.New[BatchArgs]("pipeline.catalogue_ended", job.Queue("callbacks"))
)

// catalogue is the id of the batch of the run's records.
const catalogue = "catalogue"

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
	_, err = runPipeline(ctx, b, clock)
	return err
}

// catalogueRecords are the run's records, by customer: bakery's and
// cafe's three, acme's import.
func catalogueRecords() (records []FetchArgs, source map[string]Raw) {
	source = map[string]Raw{
		// rec-3 answers 503 twice before it serves the record; rec-4's
		// price is garbage.
		"rec-1": {Customer: "bakery", Name: "kettle", Price: "24.90"},
		"rec-2": {Customer: "bakery", Name: "toaster", Price: "39.00"},
		"rec-3": {Customer: "bakery", Name: "teapot", Price: "18.50"},
		"rec-4": {Customer: "cafe", Name: "mug", Price: "4,5O"},
		"rec-5": {Customer: "cafe", Name: "spoon", Price: "1.20"},
		"rec-6": {Customer: "cafe", Name: "tray", Price: "12.00"},
	}
	for i := 1; i <= bulkRecords; i++ {
		source[fmt.Sprintf("%s-%02d", bulk, i)] = Raw{Customer: bulk, Name: fmt.Sprintf("item-%02d", i), Price: fmt.Sprintf("%d.50", i)}
	}
	for id, r := range source {
		records = append(records, FetchArgs{Customer: r.Customer, Record: id})
	}
	// acme's import first: it is in the queue before the others' records.
	sort.Slice(records, func(i, j int) bool {
		a, b := records[i], records[j]
		if (a.Customer == bulk) != (b.Customer == bulk) {
			return a.Customer == bulk
		}
		return a.Record < b.Record
	})
	return records, source
}

// runPipeline runs the records through the steps on b, with a worker of
// its own, until the batch succeeded after the redrive, and checks the
// outcome (report). It returns the pipeline, with what its handlers saw.
func runPipeline(ctx context.Context, b *broker.Broker, clock *demo.Clock) (*Pipeline, error) {
	records, raws := catalogueRecords()
	source := &Source{records: raws, failures: map[string]int{"rec-3": 2}, slow: bulk + "-", latency: bulkLatency}
	srv := httptest.NewServer(source)
	defer srv.Close()

	// Every customer runs one record per step at a time; acme three.
	for _, q := range steps {
		if err := b.SetKeyConcurrency(ctx, q, "", customerCap); err != nil {
			return nil, err
		}
		if err := b.SetKeyConcurrency(ctx, q, bulk, bulkCap); err != nil {
			return nil, err
		}
	}
	clock.Printf("per-customer caps in each step: %d record at a time, %s %d (its %d-record import answers in %v a record)",
		customerCap, bulk, bulkCap, bulkRecords, bulkLatency)

	p := newPipeline(b, srv.URL, srv.Client(), clock)
	p.expect(records)
	reg := job.NewRegistry()
	p.register(reg)
	w, err := worker.New(worker.Options{
		Broker:      b,
		Registry:    reg,
		Concurrency: 8,
		Queues: []worker.Queue{{Name: "fetch", Weight: 1}, {Name: "transform", Weight: 2}, {Name: "store", Weight: 3},
			{Name: "callbacks", Weight: 3}},
	})
	if err != nil {
		return nil, err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	// One batch for the records; the fetches go in, and it is sealed: the
	// later steps join it as the records go on.
	stored, err := CatalogueStored.Envelope(BatchArgs{catalogue})
	if err != nil {
		return nil, err
	}
	ended, err := CatalogueEnded.Envelope(BatchArgs{catalogue})
	if err != nil {
		return nil, err
	}
	// The demo's records need not outlive it by the default week.
	if _, err := b.CreateBatch(ctx, broker.BatchSpec{ID: catalogue, OnSuccess: stored, OnComplete: ended, Keep: time.Hour}); err != nil {
		return nil, err
	}
	fetches := make([]*job.Envelope, len(records))
	for i, r := range records {
		if fetches[i], err = Fetch.Envelope(r, job.ID("fetch-"+r.Record)); err != nil {
			return nil, err
		}
	}
	if err := b.AddToBatch(ctx, catalogue, fetches...); err != nil {
		return nil, err
	}
	if err := b.SealBatch(ctx, catalogue); err != nil {
		return nil, err
	}
	clock.Printf("batch %s: %d fetches added in one call, sealed; each step hands its record on with job.Next", catalogue, len(fetches))

	// The batch ended with a step dead: that is the person's cue.
	select {
	case <-p.parked:
	case <-p.done:
		return nil, errors.New("the pipeline succeeded with the poison record in it")
	case <-ctx.Done():
		return nil, fmt.Errorf("timed out before the batch ended with a dead step: %s", p.status(context.Background()))
	}
	dead := deadletter.New(b)
	page, err := dead.List(ctx, Transform.Queue(), deadletter.ListOptions{})
	if err != nil {
		return nil, err
	}
	if len(page.Records) != 1 || page.Records[0].ID != "transform-rec-4" {
		return nil, fmt.Errorf("%d steps parked in transform, want transform-rec-4 alone", len(page.Records))
	}
	r := page.Records[0]
	clock.Printf("parked for a person: %s in queue %s after %d attempt(s): %s", r.ID, r.Queue, r.Attempts, r.Error)

	// The person fixes the cause, then redrives the very job.
	p.correct("rec-4", "4.50")
	clock.Printf("a person corrects rec-4's price to 4.50 and redrives %s", r.ID)
	if err := dead.Redrive(ctx, r.Queue, 0, r.ID); err != nil {
		return nil, err
	}

	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("timed out after the redrive: %s", p.status(context.Background()))
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return nil, err
	}
	return p, p.report(context.Background(), raws)
}

// report prints the warehouse, the customers' caps and the batch, and
// checks them: every record stored with its price, no customer above its
// cap in any step and acme's override used, bakery's records all stored
// before acme's import was, every step of every record succeeded, each
// callback run once, the batch ended once with the poison record dead.
func (p *Pipeline) report(ctx context.Context, source map[string]Raw) error {
	rows := p.rows()
	p.clock.Printf("stored %d of %d records:", len(rows), len(source))
	var problems []string
	bulkRows := 0
	for _, r := range rows {
		want := wantCents(r.Record, source[r.Record])
		if want != r.Cents || source[r.Record].Customer != r.Customer {
			problems = append(problems, fmt.Sprintf("%s stored for %q at %d cents, want %q at %d", r.Record, r.Customer, r.Cents, source[r.Record].Customer, want))
		}
		if r.Customer == bulk {
			bulkRows++
			continue
		}
		p.clock.Printf("  %-6s %s %-8s %4d.%02d", r.Customer, r.Record, r.Name, r.Cents/100, r.Cents%100)
	}
	p.clock.Printf("  %-6s %d records of its import", bulk, bulkRows)
	if len(rows) != len(source) {
		problems = append(problems, fmt.Sprintf("%d records stored, want %d", len(rows), len(source)))
	}

	p.mu.Lock()
	peaks := maps.Clone(p.peak)
	backlog, bakeryDone := p.backlog["bakery"]
	p.mu.Unlock()
	for _, q := range steps {
		var line []string
		for _, c := range []string{bulk, "bakery", "cafe"} {
			n, limit := peaks[q+" "+c], capOf(c)
			line = append(line, fmt.Sprintf("%s %d (cap %d)", c, n, limit))
		}
		p.clock.Printf("most records of one customer at once in %-9s %s", q+":", strings.Join(line, ", "))
	}
	for sc, n := range peaks {
		_, c, _ := strings.Cut(sc, " ")
		if n > capOf(c) {
			problems = append(problems, fmt.Sprintf("%s: %d handlers at once, above the cap of %d", sc, n, capOf(c)))
		}
	}
	if peaks["fetch "+bulk] <= customerCap {
		problems = append(problems, fmt.Sprintf("%s never fetched more than %d record at once: its own cap of %d was not used", bulk, customerCap, bulkCap))
	}
	if !bakeryDone || backlog == 0 {
		problems = append(problems, fmt.Sprintf("bakery's records were not all stored while %s's import was under way (its records left then: %d)", bulk, backlog))
	}

	st, err := p.broker.Batch(ctx, catalogue)
	if err != nil {
		return err
	}
	p.clock.Printf("batch %s: %d steps, %d succeeded, %d dead; success callback fired %t, complete callback fired %t",
		catalogue, st.Total, st.Succeeded, st.Dead, st.SuccessFired, st.CompleteFired)
	if st.Total != 3*len(source) || st.Succeeded != st.Total || !st.SuccessFired || !st.CompleteFired {
		problems = append(problems, fmt.Sprintf("batch %s: %+v, want %d steps all succeeded", catalogue, *st, 3*len(source)))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The callbacks are the jobs "<batch id>:success" and ":complete" (broker.BatchSpec).
	for _, name := range []string{catalogue + ":success", catalogue + ":complete"} {
		if n := p.callbacks[name]; n != 1 {
			problems = append(problems, fmt.Sprintf("callback %s ran %d times, want once", name, n))
		}
	}
	if p.deadAtEnd != 1 {
		problems = append(problems, fmt.Sprintf("the batch ended with %d steps dead, want 1", p.deadAtEnd))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	p.clock.Printf("all checks passed")
	return nil
}

// wantCents is what a record must be stored at: its source price, or for
// rec-4 the person's correction.
func wantCents(record string, r Raw) int64 {
	if record == "rec-4" {
		return 450
	}
	cents, err := parsePrice(r.Price)
	if err != nil {
		return -1
	}
	return cents
}

// Pipeline holds the handlers of the three steps and of the batch's
// callbacks.
type Pipeline struct {
	broker *broker.Broker // reads the batch
	source string
	client *http.Client
	clock  *demo.Clock

	parked   chan struct{} // the batch ended with steps dead
	done     chan struct{} // closed when the batch succeeded and both its callbacks ran
	doneOnce sync.Once

	mu          sync.Mutex
	warehouse   map[string]Product
	corrections map[string]string // record -> price, entered by a person
	callbacks   map[string]int    // callback job id -> runs
	deadAtEnd   int               // dead steps when the batch ended
	orders      map[string]int    // customer -> records in the run
	stored      map[string]int    // customer -> records stored
	backlog     map[string]int    // customer -> acme's records not yet stored when the customer's last one was
	running     map[string]int    // "step customer" -> handlers running now
	peak        map[string]int    // "step customer" -> most handlers running at once
}

func newPipeline(b *broker.Broker, source string, client *http.Client, clock *demo.Clock) *Pipeline {
	return &Pipeline{broker: b, source: source, client: client, clock: clock,
		parked: make(chan struct{}, 1), done: make(chan struct{}),
		warehouse: map[string]Product{}, corrections: map[string]string{},
		callbacks: map[string]int{}, orders: map[string]int{}, stored: map[string]int{}, backlog: map[string]int{},
		running: map[string]int{}, peak: map[string]int{}}
}

// expect records how many records each customer has in the run, so that
// store can tell when a customer's last one is stored.
func (p *Pipeline) expect(records []FetchArgs) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range records {
		p.orders[r.Customer]++
	}
}

// begin counts a handler of step for customer as running, and the most of
// them at once; the returned end counts it out.
func (p *Pipeline) begin(step, customer string) (end func()) {
	sc := step + " " + customer
	p.mu.Lock()
	p.running[sc]++
	p.peak[sc] = max(p.peak[sc], p.running[sc])
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.running[sc]--
		p.mu.Unlock()
	}
}

// say prints a step's line about a record, but not the routine lines of
// acme's import: store tells how far it got.
func (p *Pipeline) say(customer, format string, args ...any) {
	if customer != bulk {
		p.clock.Printf(format, args...)
	}
}

func (p *Pipeline) register(reg *job.Registry) {
	Fetch.Handle(reg, p.fetch)
	Transform.Handle(reg, p.transform)
	Store.Handle(reg, p.store)
	CatalogueStored.Handle(reg, p.catalogueStored)
	CatalogueEnded.Handle(reg, p.catalogueEnded)
}

// fetch downloads a record and hands it to transform.
func (p *Pipeline) fetch(ctx context.Context, j *job.Job[FetchArgs]) error {
	defer p.begin("fetch", j.Args.Customer)()
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
		p.say(j.Args.Customer, "fetch     %s attempt %d failed: source answered %s; retrying with backoff", j.Args.Record, j.Attempt, resp.Status)
		return fmt.Errorf("fetch %s: source answered %s", j.Args.Record, resp.Status)
	}
	var raw Raw
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return fmt.Errorf("fetch %s: %w", j.Args.Record, err)
	}
	raw.Customer = j.Args.Customer
	p.say(raw.Customer, "fetch     %s attempt %d: ok", raw.Record, j.Attempt)
	return handOn(ctx, Transform, raw, "transform-"+raw.Record)
}

// transform parses the price, or the correction a person entered for it.
// A price that does not parse cannot be fixed by retrying: the record is
// dead-lettered at once, to wait for a person.
func (p *Pipeline) transform(ctx context.Context, j *job.Job[Raw]) error {
	defer p.begin("transform", j.Args.Customer)()
	price := j.Args.Price
	p.mu.Lock()
	fixed, ok := p.corrections[j.Args.Record]
	p.mu.Unlock()
	if ok {
		price = fixed
	}
	cents, err := parsePrice(price)
	if err != nil {
		p.say(j.Args.Customer, "transform %s attempt %d: poison input, permanent: %v", j.Args.Record, j.Attempt, err)
		return retry.Permanent(fmt.Errorf("transform %s: %w", j.Args.Record, err))
	}
	if ok {
		p.say(j.Args.Customer, "transform %s attempt %d: %q corrected to %q -> %d cents", j.Args.Record, j.Attempt, j.Args.Price, price, cents)
	} else {
		p.say(j.Args.Customer, "transform %s: %q -> %d cents", j.Args.Record, price, cents)
	}
	return handOn(ctx, Store, Product{Customer: j.Args.Customer, Record: j.Args.Record, Name: j.Args.Name, Cents: cents}, "store-"+j.Args.Record)
}

// store upserts the product by record id, so storing it twice leaves one
// row. It tells when a customer's last record is stored, and how far
// acme's import got.
func (p *Pipeline) store(ctx context.Context, j *job.Job[Product]) error {
	c := j.Args.Customer
	defer p.begin("store", c)()
	p.mu.Lock()
	_, again := p.warehouse[j.Args.Record]
	p.warehouse[j.Args.Record] = j.Args
	if !again {
		p.stored[c]++
	}
	n, of, left := p.stored[c], p.orders[c], p.orders[bulk]-p.stored[bulk]
	last := !again && of > 0 && n == of
	if last && c != bulk {
		p.backlog[c] = left
	}
	p.mu.Unlock()
	p.say(c, "store     %s: upserted", j.Args.Record)
	switch {
	case c == bulk && !again && (n%20 == 0 || last):
		p.clock.Printf("store     %s: %d of %d records of its import stored", c, n, of)
	case last:
		p.clock.Printf("store     %s: all %d records stored; %s has %d of %d still to store", c, of, bulk, left, p.orders[bulk])
	}
	return nil
}

// catalogueStored runs once every step of every record succeeded: the
// batch's success callback.
func (p *Pipeline) catalogueStored(ctx context.Context, j *job.Job[BatchArgs]) error {
	st, err := p.batch(ctx, j)
	if err != nil {
		return err
	}
	p.clock.Printf("batch %s succeeded (success callback): %d of %d steps", st.ID, st.Succeeded, st.Total)
	p.lastRan()
	return nil
}

// catalogueEnded runs once every record's chain ended, its last step
// succeeded or dead: the batch's complete callback. With none dead the
// success callback follows; with some, they wait in the dead letters, and
// the program is told.
func (p *Pipeline) catalogueEnded(ctx context.Context, j *job.Job[BatchArgs]) error {
	st, err := p.batch(ctx, j)
	if err != nil {
		return err
	}
	p.clock.Printf("batch %s ended (complete callback): %d steps succeeded, %d dead", st.ID, st.Succeeded, st.Dead)
	p.mu.Lock()
	p.deadAtEnd = st.Dead
	p.mu.Unlock()
	if st.Dead > 0 {
		p.clock.Printf("batch %s does not succeed while a step is dead: its record waits for a person", st.ID)
		select {
		case p.parked <- struct{}{}:
		default: // told already
		}
	}
	p.lastRan()
	return nil
}

// lastRan closes done once both callbacks ran and the batch succeeded:
// the worker may run them in either order, and the program checks both.
func (p *Pipeline) lastRan() {
	p.mu.Lock()
	both := p.callbacks[catalogue+":success"] > 0 && p.callbacks[catalogue+":complete"] > 0
	p.mu.Unlock()
	if both {
		p.doneOnce.Do(func() { close(p.done) })
	}
}

// batch counts a callback's run and reads the batch it is about, named by
// the header delayq-batch of the callback (docs/batches.md).
func (p *Pipeline) batch(ctx context.Context, j *job.Job[BatchArgs]) (*broker.BatchStatus, error) {
	p.mu.Lock()
	p.callbacks[j.ID]++
	p.mu.Unlock()
	return p.broker.Batch(ctx, j.Headers["delayq-batch"])
}

// status describes the batch, for an error.
func (p *Pipeline) status(ctx context.Context) string {
	st, err := p.broker.Batch(ctx, catalogue)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%+v", *st)
}

// correct records a person's correction of a record's price.
func (p *Pipeline) correct(record, price string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.corrections[record] = price
}

// handOn declares the next step of a record, with an id derived from the
// record: the worker enqueues it when this step succeeds, and a step that
// runs again hands on the same job, which is enqueued once. Being the next
// step of a batch member, it joins the batch.
func handOn[T any](ctx context.Context, step *job.Type[T], args T, id string) error {
	env, err := step.Envelope(args, job.ID(id))
	if err != nil {
		return err
	}
	return job.Next(ctx, env)
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

// Source serves records; some fail a number of times first, and those of
// a bulk export (ids starting with slow) take latency to answer.
type Source struct {
	mu       sync.Mutex
	records  map[string]Raw
	failures map[string]int // record -> 503s still to give
	slow     string
	latency  time.Duration
}

func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/records/")
	if s.slow != "" && strings.HasPrefix(id, s.slow) {
		select {
		case <-time.After(s.latency):
		case <-r.Context().Done():
			return
		}
	}
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
