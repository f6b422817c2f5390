// Package faulttest holds delayq's fault suites: tests that run the real
// broker and worker against redis-server processes they start on loopback,
// and break things while jobs run: worker processes killed with SIGKILL,
// Redis killed and restarted, connections dropped, stalled and slowed by a
// proxy, garbage written into Redis, outbox relays killed with SIGKILL
// while Redis is stopped (the outbox suite, on a PostgreSQL server that
// internal/pgtest starts), and worker processes stopped with SIGSTOP past
// their lease and resumed with SIGCONT (the stall suites). Each suite checks that no job whose
// Enqueue returned nil is lost, explains every duplicate, and leaves no
// keys, goroutines or Redis memory behind. It also holds the security tests
// (TLS, a namespace-restricted ACL user, payloads as data, the dashboard
// showing hostile payloads in a process with a capped address space) and
// the clock-skew check.
//
// The slow suites (crashes, restarts, network faults) run only with
// DELAYQ_FAULT_SUITES=1 and without -short; .ci/run runs them that way, on
// their own and with -race and -v, which prints each suite's summary. The worker processes of the crash suite are the
// program in cmd/faultworker, those of the stall suites the program in
// cmd/stallworker, the relay processes of the outbox suite the program in
// cmd/faultrelay, the dashboard process of the hostile-payload test the
// program in cmd/faultdashboard, each built by its test.
//
// docs/guarantees.md names the test behind each promise.
package faulttest
