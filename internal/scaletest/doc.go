// Package scaletest holds the tests that need a whole Redis Cluster or
// Sentinel setup and many jobs: a sharded queue spread over the masters,
// failovers under load in the default and the durable mode, and the
// throughput benchmark of one shard against three. They run only with
// DELAYQ_TEST_SCALE=1 (as .ci/run does); see docs/scaling.md for results.
package scaletest
