package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.yaml.in/yaml/v2"

	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/middleware"
	"github.com/delayq/delayq/retry"
)

type resize struct {
	Image string `json:"image"`
}

var resizeImage = job.New[resize]("image.resize")

// exported runs delayq's metrics as docs/observability.md wires them: the
// OpenTelemetry Prometheus exporter with its default options, Metrics on a
// real worker, EnqueueMetrics on the producer, ObserveQueues with the live
// processes of the registry; jobs succeed, retry and die. It returns the
// metric families the exporter prints.
func exported(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	bd := testkit.Setup(t)
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	withMP := middleware.WithMeterProvider(mp)
	unregister, err := middleware.ObserveQueues(bd.B, nil, withMP,
		middleware.WithServingProcesses(fleet.ServingCounts(bd.B.Client(), bd.B.Namespace())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unregister() })
	// A worker process as the registry lists it (what worker.Run records).
	reg, err := fleetreg.New(bd.RDB, bd.NS, fleet.Process{Role: fleet.RoleWorker, Queues: []fleet.Queue{{Name: naming.DefaultQueue, Concurrency: 4}}}, fleetreg.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Beat(bd.Ctx); err != nil {
		t.Fatal(err)
	}

	// A rate-limited type and a capped type with no job: their held-by
	// series are 0.
	if err := bd.B.SetRateLimit(bd.Ctx, naming.DefaultQueue, "deploy.limited", job.RateLimit{Count: 1, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := bd.B.SetConcurrency(bd.Ctx, naming.DefaultQueue, "deploy.capped", 2); err != nil {
		t.Fatal(err)
	}
	enq := job.ChainEnqueuer(bd.B, middleware.EnqueueMetrics(withMP))
	fast := job.WithBackoff(retry.Exponential{Initial: 10 * time.Millisecond, Multiplier: 1, Max: 10 * time.Millisecond})
	for _, img := range []string{"a.png", "flaky-b.png", "broken-c.png"} {
		if _, err := resizeImage.Enqueue(bd.Ctx, enq, resize{Image: img}, fast); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := resizeImage.Enqueue(bd.Ctx, enq, resize{Image: "later.png"}, job.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int32
	resizeImage.Handle(bd.Reg, func(ctx context.Context, j *job.Job[resize]) error {
		switch {
		case strings.HasPrefix(j.Args.Image, "broken-"):
			ended.Add(1)
			return retry.Permanent(errors.New("not an image"))
		case strings.HasPrefix(j.Args.Image, "flaky-") && j.Attempt == 1:
			return errors.New("storage busy")
		}
		ended.Add(1)
		return nil
	})
	stop := testkit.StartWorker(t, bd.Config(t), middleware.Metrics(withMP))
	redistest.WaitFor(t, 30*time.Second, "three jobs ended", func() bool { return ended.Load() == 3 })
	stop() // waits for the acknowledgements: the counters are final

	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// names are the series names a query may use: a counter's and a gauge's
// own, a histogram's _bucket, _sum and _count.
func names(families []*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for _, f := range families {
		n := f.GetName()
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[n+"_bucket"], out[n+"_sum"], out[n+"_count"] = true, true, true
			continue
		}
		out[n] = true
	}
	return out
}

var metricName = regexp.MustCompile(`\b(?:delayq|messaging)_[a-z0-9_]+`)

// TestDeployMetricsExist: every metric the Grafana dashboard, the alert
// rules and the KEDA ScaledObject name is one the exporter prints, each
// alert has what Alertmanager needs, and the alerts cover lateness, dead
// letters (and their trims by the cap), no live worker and held-back jobs.
func TestDeployMetricsExist(t *testing.T) {
	families := exported(t)
	have := names(families)
	// The gauges the alerts lean on carry what the run left: one live
	// process serving the queue, one dead job, one scheduled for later.
	for _, f := range families {
		want, ok := map[string]float64{"delayq_queue_processes": 1, "delayq_queue_dead": 1, "delayq_queue_scheduled": 1, "delayq_queue_held": 0}[f.GetName()]
		if ok && (len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != want) {
			t.Errorf("%s: %v, want one series of %v", f.GetName(), f.GetMetric(), want)
		}
	}
	for _, want := range []string{"delayq_queue_processes", "delayq_queue_held", "delayq_queue_parked", "delayq_queue_paused", "delayq_queue_held_by_rate",
		"delayq_queue_held_by_cap", "delayq_queue_held_by_key",
		"delayq_queue_dead_trimmed_total", "delayq_queue_dead_trimmed_unarchived_total"} {
		if !have[want] {
			t.Errorf("the exporter does not print %s", want)
		}
	}
	// Label names (messaging_destination_name, delayq_job_type, …) look
	// like metric names; the exporter's labels are told apart.
	labelNames := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labelNames[l.GetName()] = true
			}
		}
	}
	check := func(where, expr string) {
		t.Helper()
		metrics := 0
		for _, n := range metricName.FindAllString(expr, -1) {
			switch {
			case have[n]:
				metrics++
			case labelNames[n]:
			default:
				t.Errorf("%s names %s, which the exporter does not print", where, n)
			}
		}
		if metrics == 0 {
			t.Errorf("%s: %q names no delayq metric", where, expr)
		}
	}

	// Alert rules.
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err := os.ReadFile("prometheus/delayq-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, &rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			check("alert "+r.Alert, r.Expr)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s lacks a severity or a summary", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("alert %s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
		}
	}
	for _, want := range []string{"DelayqQueueLate", "DelayqJobsStartLate", "DelayqJobsDead", "DelayqNoLiveWorker", "DelayqJobsHeldBack", "DelayqDeadLettersTrimmed"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}

	// Grafana dashboard.
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	raw, err = os.ReadFile("grafana/delayq.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana dashboard: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) < 8 {
		t.Errorf("grafana dashboard: uid %q, %d panels", dash.UID, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			check("variable "+v.Name, v.Definition)
		}
	}

	// KEDA.
	var keda struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Triggers []struct {
				Type     string            `yaml:"type"`
				Metadata map[string]string `yaml:"metadata"`
			} `yaml:"triggers"`
		} `yaml:"spec"`
	}
	raw, err = os.ReadFile("keda/scaledobject.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &keda); err != nil {
		t.Fatalf("keda: %v", err)
	}
	if keda.Kind != "ScaledObject" || len(keda.Spec.Triggers) != 1 || keda.Spec.Triggers[0].Type != "prometheus" {
		t.Fatalf("keda: %+v", keda)
	}
	check("keda trigger", keda.Spec.Triggers[0].Metadata["query"])
}

// TestObservabilitySample: each line of the sample in
// docs/observability.md is a series the exporter, wired as the page shows,
// prints: the same metric with the same label names (otel_scope_* ones
// included).
func TestObservabilitySample(t *testing.T) {
	families := exported(t)
	labels := map[string]string{} // series name -> its sorted label names
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName())
			}
			sort.Strings(ls)
			n := f.GetName()
			if f.GetType() == dto.MetricType_HISTOGRAM {
				labels[n+"_sum"], labels[n+"_count"] = strings.Join(ls, ","), strings.Join(ls, ",")
				continue
			}
			labels[n] = strings.Join(ls, ",")
		}
	}
	raw, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sample, ok := strings.Cut(string(raw), "Sample (as the exporter prints it")
	if !ok {
		t.Fatal(`docs/observability.md has no "Sample (as the exporter prints it"`)
	}
	_, sample, _ = strings.Cut(sample, "```\n")
	sample, _, _ = strings.Cut(sample, "```")
	line := regexp.MustCompile(`^((?:delayq|messaging)_[a-z_]+)\{([^}]*)\} \S+$`)
	n := 0
	sc := bufio.NewScanner(strings.NewReader(sample))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Errorf("sample line %q is not a series", sc.Text())
			continue
		}
		n++
		var ls []string
		for _, kv := range strings.Split(m[2], ",") {
			k, _, _ := strings.Cut(kv, "=")
			ls = append(ls, k)
		}
		sort.Strings(ls)
		want, ok := labels[m[1]]
		if !ok {
			t.Errorf("the sample shows %s, which the exporter does not print", m[1])
			continue
		}
		if got := strings.Join(ls, ","); got != want {
			t.Errorf("%s: the sample's labels are %s, the exporter's %s", m[1], got, want)
		}
	}
	if n < 10 || !strings.Contains(sample, "otel_scope_name=") {
		t.Errorf("the sample has %d series, or lacks otel_scope_name", n)
	}
}
