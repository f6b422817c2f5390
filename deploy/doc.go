// Package deploy holds what operators plug into their own systems, with the
// test that keeps it true: a Grafana dashboard (grafana/delayq.json),
// Prometheus alert rules (prometheus/delayq-alerts.yml) and a KEDA
// ScaledObject (keda/scaledobject.yaml). TestDeployMetricsExist runs the
// Prometheus exporter over a real worker and checks that every metric they
// name is one it prints. No Go code here is meant to be imported.
package deploy
