// Command prometheus serves delayq's metrics on a Prometheus /metrics
// endpoint through the OpenTelemetry Prometheus exporter. It enqueues a few
// jobs (some succeed, some are retried, some fail for good, some wait an
// hour), lets a worker with middleware.Metrics handle what is due, scrapes
// its own endpoint once, prints the delayq_ lines and exits.
//
// It uses REDIS_URL when set, otherwise an embedded miniredis. Only this
// example imports the Prometheus exporter; the delayq packages depend on the
// OpenTelemetry metric API alone.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/demo"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
	"github.com/delayq/delayq/worker"
)

type Resize struct {
	Image string `json:"image"`
}

var ResizeImage = job.New[Resize]("image.resize", job.MaxRetries(3))

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus example:", err)
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
	b, err := broker.New(rdb, broker.Options{Namespace: "example-prometheus-" + job.NewID()})
	if err != nil {
		return err
	}

	// An OpenTelemetry meter provider whose reader is the Prometheus
	// exporter, registered in a registry of our own.
	registry := prometheus.NewRegistry()
	// WithoutScopeInfo keeps the printed lines short.
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	withMP := middleware.WithMeterProvider(mp)

	unregister, err := middleware.ObserveQueues(b, nil, withMP)
	if err != nil {
		return err
	}
	defer func() { _ = unregister() }()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	// Producer: 8 images; names say how the handler behaves.
	enq := job.ChainEnqueuer(b, middleware.EnqueueMetrics(withMP))
	fast := job.WithBackoff(retry.Exponential{Initial: 20 * time.Millisecond, Multiplier: 2, Max: time.Second})
	for _, img := range []string{"a.png", "b.png", "c.png", "flaky-d.png", "flaky-e.png", "broken-f.png"} {
		if _, err := ResizeImage.Enqueue(ctx, enq, Resize{Image: img}, fast); err != nil {
			return err
		}
	}
	for _, img := range []string{"later-g.png", "later-h.png"} {
		if _, err := ResizeImage.Enqueue(ctx, enq, Resize{Image: img}, job.In(time.Hour)); err != nil {
			return err
		}
	}

	reg := job.NewRegistry()
	var settled atomic.Int32
	ResizeImage.Handle(reg, func(ctx context.Context, j *job.Job[Resize]) error {
		switch {
		case strings.HasPrefix(j.Args.Image, "broken-"):
			settled.Add(1)
			return retry.Permanent(errors.New("not an image"))
		case strings.HasPrefix(j.Args.Image, "flaky-") && j.Attempt == 1:
			return errors.New("storage busy")
		}
		settled.Add(1)
		return nil
	})
	w, err := worker.New(worker.Options{Broker: b, Registry: reg, Middleware: []job.Middleware{middleware.Metrics(withMP)}})
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for settled.Load() < 6 {
		if time.Now().After(deadline) {
			stop()
			return errors.New("jobs not handled within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop() // waits for the acks, so the counters are final
	if err := <-stopped; err != nil {
		return err
	}

	// Scrape once, as Prometheus would.
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET /metrics: %s: %s", resp.Status, body)
	}
	fmt.Printf("GET http://%s/metrics\n", ln.Addr())
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var lines int
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "delayq_") || strings.Contains(l, "_bucket{") {
			continue // other series and histogram buckets: see the full page for those
		}
		fmt.Println(l)
		lines++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if lines == 0 {
		return errors.New("no delayq_ series on /metrics")
	}
	return nil
}
