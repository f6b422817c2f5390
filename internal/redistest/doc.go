// Package redistest gives tests a Redis server to run against, isolated per
// test by key namespace instead of by flushing.
//
// # Shared server
//
// [New], [Addr] and [URL] use one server per test binary, chosen the first
// time any of them is called:
//
//  1. If REDIS_URL is set, that server is used and nothing is started.
//  2. Otherwise, the server binary is started on a free 127.0.0.1 port
//     with persistence off and a temporary directory: redis-server from
//     PATH, or the binary DELAYQ_REDIS_SERVER names ([ServerEnv]), e.g.
//     /usr/bin/valkey-server, so the suite runs unchanged against any
//     redis-server-compatible server.
//  3. Otherwise (no redis-server on PATH, DELAYQ_REDIS_SERVER unset), if
//     DELAYQ_REQUIRE_REDIS=1, the test fails. If not, an in-process
//     miniredis is started and the test log says so.
//
// Each call to [New] gets its own key namespace; keys under it are deleted
// when the test ends, so tests can share the server and run in parallel.
// Packages that call [New], [Addr] or [URL] must call [Main] from TestMain
// so the server is stopped and leaked goroutines are reported:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// # Topologies
//
// With DELAYQ_TEST_TOPOLOGY=cluster or =sentinel ([TopologyEnv]) the shared
// server is a Redis Cluster (three masters, three replicas) or a Sentinel
// setup (master, replica, three Sentinels) instead, started once per test
// binary, and [New] returns a cluster or failover client; namespaces are
// deleted from every master. Tests that must see every key use [Keys]
// rather than KEYS; [TopologyAddrs] gives the addresses a subprocess
// connects to.
//
// # Dedicated servers
//
// Fault tests that kill or restart Redis use [Start], which runs a
// server (the same binary) owned by one test; see [Server]. [StartCluster] and
// [StartSentinel] start a whole cluster or Sentinel setup for one test,
// whose nodes are Servers too, for failover tests.
package redistest
