// Package shardtest holds the tests that prove a sharded queue answers
// like an unsharded one, and no code.
//
// Every test seeds two namespaces of the shared test server with the same
// jobs in every state (scheduled in the future, due, processing, dead,
// with several types, ids and payloads, and fixed ready times, lease
// deadlines and died-at times), in a queue declared with one shard in one
// namespace and three in the other. It then asks both the same questions
// and compares the answers: every exported method of *broker.Broker, the
// deadletter.Inspector, every delayq subcommand that reads or changes jobs
// (the binary, built once per test binary) and every dashboard page and
// action. The answers must be equal after normalising only what
// legitimately differs: the namespace, CSRF tokens and, for reads on the
// server's own clock, the instants that clock gives (the read's "now" and
// what is derived from it). Reads also run with a pinned clock
// (protocol.UseClock, delayq --now), where nothing but the namespace
// and tokens may differ; changes run pinned, on fresh namespaces, and are
// compared again by reading everything back.
//
// The suite runs on a single redis-server and, with DELAYQ_TEST_TOPOLOGY
// set, on a Redis Cluster and a Sentinel setup (see internal/redistest);
// on a cluster the three shards live on different masters. The delayq
// command connects to one node only, so its cases are skipped on a cluster.
package shardtest
