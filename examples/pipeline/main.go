// Command pipeline runs a batch of records through three steps — fetch,
// transform, store — each a job type on its own queue, each enqueueing the
// next. One worker serves the three queues by weight, favouring the steps
// nearer the end so that records already under way finish first.
//
// It shows that one bad record does not hold up a batch:
//
//   - a fetch that fails transiently (the source answers 503 twice) is
//     retried with backoff and goes on;
//   - a poison record (a price that does not parse) fails permanently in
//     transform and lands in the dead letters with its error;
//   - the rest of the batch flows through to the store.
//
// Each hand-off enqueues the next step with a job id derived from the record
// ("transform-rec-3"), so a step that runs twice (at-least-once) does not
// start the next step twice while it is pending, and the store step is an
// upsert, so storing a record twice leaves one row.
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

// The three steps, one queue each.
var (
	Fetch     = job.New[FetchArgs]("pipeline.fetch", job.Queue("fetch"), job.MaxRetries(5), fast)
	Transform = job.New[Raw]("pipeline.transform", job.Queue("transform"), job.MaxRetries(5), fast)
	Store     = job.New[Product]("pipeline.store", job.Queue("store"), job.MaxRetries(5), fast)
)

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

	p := &Pipeline{jobs: b, source: srv.URL, client: srv.Client(), clock: clock,
		warehouse: make(map[string]Product), finished: make(chan string, 16)}
	reg := job.NewRegistry()
	Fetch.Handle(reg, p.fetch)
	Transform.Handle(reg, p.transform)
	Store.Handle(reg, p.store)
	w, err := worker.New(worker.Config{
		Broker:   b,
		Registry: reg,
		Queues:   []worker.Queue{{Name: "fetch", Weight: 1}, {Name: "transform", Weight: 2}, {Name: "store", Weight: 3}},
	})
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	batch := []FetchArgs{{"rec-1"}, {"rec-2"}, {"rec-3"}, {"rec-4"}, {"rec-5"}, {"rec-6"}}
	if _, err := Fetch.EnqueueMany(ctx, b, batch); err != nil {
		return err
	}
	clock.Printf("enqueued a batch of %d fetches in one call", len(batch))

	// Every record ends stored or dead: the store step reports the first,
	// the dead letters show the second.
	dead := deadletter.New(b)
	var deadRecs []*broker.DeadRecord
	stored := map[string]bool{}
	for len(stored)+len(deadRecs) < len(batch) {
		select {
		case id := <-p.finished:
			stored[id] = true
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("timed out: %d stored, %d dead of %d", len(stored), len(deadRecs), len(batch))
		}
		deadRecs = deadRecs[:0]
		for _, q := range []string{"fetch", "transform", "store"} {
			page, err := dead.List(ctx, q, deadletter.ListOptions{})
			if err != nil {
				return err
			}
			deadRecs = append(deadRecs, page.Records...)
		}
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		return err
	}

	for _, r := range deadRecs {
		clock.Printf("dead letter: %s in queue %s after %d attempt(s): %s", r.ID, r.Queue, r.Attempts, r.Error)
	}
	rows := p.rows()
	clock.Printf("stored %d of %d records:", len(rows), len(batch))
	for _, r := range rows {
		clock.Printf("  %s %-8s %4d.%02d", r.Record, r.Name, r.Cents/100, r.Cents%100)
	}
	for _, q := range []string{"fetch", "transform", "store"} {
		st, err := b.Stats(context.Background(), q)
		if err != nil {
			return err
		}
		clock.Printf("queue %-9s scheduled %d, processing %d, dead %d", q, st.Scheduled, st.Processing, st.Dead)
	}
	return nil
}

// Pipeline holds the handlers of the three steps.
type Pipeline struct {
	jobs     job.Enqueuer
	source   string
	client   *http.Client
	clock    *demo.Clock
	finished chan string // records stored

	mu        sync.Mutex
	warehouse map[string]Product
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

// transform parses the price. A price that does not parse cannot be fixed
// by retrying: the record is dead-lettered at once.
func (p *Pipeline) transform(ctx context.Context, j *job.Job[Raw]) error {
	cents, err := parsePrice(j.Args.Price)
	if err != nil {
		p.clock.Printf("transform %s attempt %d: poison input, permanent: %v", j.Args.Record, j.Attempt, err)
		return retry.Permanent(fmt.Errorf("transform %s: %w", j.Args.Record, err))
	}
	p.clock.Printf("transform %s: %q -> %d cents", j.Args.Record, j.Args.Price, cents)
	return handOff(ctx, p.jobs, Store, Product{Record: j.Args.Record, Name: j.Args.Name, Cents: cents}, "store-"+j.Args.Record)
}

// store upserts the product by record id, so storing it twice leaves one row.
func (p *Pipeline) store(ctx context.Context, j *job.Job[Product]) error {
	p.mu.Lock()
	p.warehouse[j.Args.Record] = j.Args
	p.mu.Unlock()
	p.clock.Printf("store     %s: upserted", j.Args.Record)
	p.finished <- j.Args.Record
	return nil
}

// handOff enqueues the next step of a record with an id derived from it. If
// a step runs again after it had already handed off, the broker refuses the
// second hand-off while the first is pending: that counts as done.
func handOff[T any](ctx context.Context, e job.Enqueuer, step *job.Type[T], args T, id string) error {
	_, err := step.Enqueue(ctx, e, args, job.ID(id))
	if errors.Is(err, broker.ErrDuplicate) {
		return nil
	}
	return err
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
