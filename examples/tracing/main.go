// Command tracing shows a delayed job joining the trace of the request that
// scheduled it. A request span enqueues two jobs through
// middleware.EnqueueTracing; a worker with middleware.Tracing handles them:
// one succeeds at once, the other fails twice and succeeds on its third
// attempt. Every span is written to stdout by the OpenTelemetry stdout
// exporter (one JSON object per span), then the program prints the trace as
// a tree and checks that each consumer span is a child of its producer span.
//
// It uses REDIS_URL when set, otherwise an embedded miniredis, and exits by
// itself: 0 when the links are as described, 1 otherwise.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

type Receipt struct {
	Order int `json:"order"`
}

type Charge struct {
	Order int `json:"order"`
	Cents int `json:"cents"`
}

var (
	SendReceipt = job.New[Receipt]("receipt.send")
	ChargeCard  = job.New[Charge]("card.charge", job.MaxRetries(5))
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tracing example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	rdb, _, closeRedis, err := demo.Redis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()
	b, err := broker.New(rdb, broker.Options{Namespace: "example-tracing-" + job.NewID()})
	if err != nil {
		return err
	}

	// Spans go to stdout and, for the summary below, to a recorder.
	fmt.Println("== spans as exported by stdouttrace ==")
	exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	if err != nil {
		return err
	}
	rec := tracetest.NewSpanRecorder()
	res := resource.NewSchemaless(attribute.String("service.name", "delayq-tracing-example"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	otel.SetTracerProvider(tp) // the middleware uses the global provider by default

	// Producer side: enqueue through the tracing middleware, inside the
	// request's span.
	enq := job.ChainEnqueuer(b, middleware.EnqueueTracing())
	reqCtx, req := tp.Tracer("example").Start(ctx, "POST /orders")
	if _, err := SendReceipt.Enqueue(reqCtx, enq, Receipt{Order: 42}, job.In(50*time.Millisecond)); err != nil {
		return err
	}
	fast := retry.Exponential{Initial: 20 * time.Millisecond, Multiplier: 2, Max: time.Second}
	if _, err := ChargeCard.Enqueue(reqCtx, enq, Charge{Order: 42, Cents: 1999}, job.WithBackoff(fast)); err != nil {
		return err
	}
	req.End()

	// Consumer side: a worker with the tracing middleware.
	reg := job.NewRegistry()
	var done atomic.Int32
	SendReceipt.Handle(reg, func(ctx context.Context, j *job.Job[Receipt]) error {
		// A span of the handler's own: a child of the consumer span.
		_, span := otel.Tracer("example").Start(ctx, "smtp.send")
		defer span.End()
		done.Add(1)
		return nil
	})
	ChargeCard.Handle(reg, func(ctx context.Context, j *job.Job[Charge]) error {
		if j.Attempt < 3 {
			return fmt.Errorf("payment gateway timeout (attempt %d)", j.Attempt)
		}
		done.Add(1)
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Middleware: []job.Middleware{middleware.Tracing()}})
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for done.Load() < 2 || len(spansNamed(rec, "process default")) < 4 {
		if time.Now().After(deadline) {
			stop()
			return errors.New("jobs not done within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-stopped; err != nil {
		return err
	}
	return summarize(rec.Ended(), req.SpanContext())
}

func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// summarize prints the request's trace as a tree and checks its links.
func summarize(spans []sdktrace.ReadOnlySpan, request trace.SpanContext) error {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanContext().TraceID() != request.TraceID() {
			continue
		}
		byID[s.SpanContext().SpanID()] = s
		children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
	}
	fmt.Printf("\n== trace %s ==\n", request.TraceID())
	var print func(id trace.SpanID, depth int)
	print = func(id trace.SpanID, depth int) {
		kids := children[id]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
		for _, s := range kids {
			var extra []string
			for _, kv := range s.Attributes() {
				switch kv.Key {
				case "delayq.job.type", "delayq.job.attempt", "delayq.job.outcome":
					extra = append(extra, fmt.Sprintf("%s=%s", strings.TrimPrefix(string(kv.Key), "delayq.job."), kv.Value.Emit()))
				}
			}
			status := ""
			if s.Status().Code.String() == "Error" {
				status = "  ERROR: " + s.Status().Description
			}
			fmt.Printf("%s%s [%s] span=%s %s%s\n", strings.Repeat("  ", depth), s.Name(), s.SpanKind(), s.SpanContext().SpanID(), strings.Join(extra, " "), status)
			print(s.SpanContext().SpanID(), depth+1)
		}
	}
	print(trace.SpanID{}, 0)

	// The checks: every consumer span's parent is a producer span of the
	// same trace, and the card job has three attempts, two of them failed.
	var consumers, failed int
	for _, s := range byID {
		if s.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		consumers++
		parent, ok := byID[s.Parent().SpanID()]
		if !ok || parent.SpanKind() != trace.SpanKindProducer {
			return fmt.Errorf("consumer span %s is not a child of a producer span", s.SpanContext().SpanID())
		}
		if s.Status().Code.String() == "Error" {
			failed++
		}
	}
	if consumers != 4 || failed != 2 {
		return fmt.Errorf("found %d consumer spans (%d failed), want 4 (2 failed)", consumers, failed)
	}
	fmt.Println("\nOK: 4 consumer spans, each a child of its producer span in the request's trace; 2 failed attempts retried")
	return nil
}
