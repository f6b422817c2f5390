// Package pgtest gives tests a PostgreSQL server to run against, started
// from Debian's binaries on a free loopback port, with one database per
// test.
//
// # Binaries
//
// initdb and postgres are looked up on PATH, then in
// /usr/lib/postgresql/*/bin (Debian's postgresql package installs them
// there; the newest version wins). Only the binaries are used: no system
// service is started or contacted. When they are missing the test is
// skipped with a message saying how to install them, or fails when
// DELAYQ_REQUIRE_POSTGRES=1 (which .ci/run sets).
//
// # Servers
//
// [Start] initdb's a cluster in the test's t.TempDir(), starts postgres on a
// free 127.0.0.1 port (listen_addresses=127.0.0.1, its Unix socket in the
// temporary directory, fsync, synchronous_commit and full_page_writes off
// for speed; nothing here survives the test anyway) and stops it at the
// test's cleanup. [Shared] starts one such server per test binary, for
// packages with many tests; [StopShared] stops it, from TestMain:
//
//	func TestMain(m *testing.M) { redistest.MainCleanup(m, pgtest.StopShared) }
//
// [Server.NewDB] creates a fresh database for one test and drops it at the
// test's cleanup; [New] does that on the shared server.
//
// # Running as root
//
// postgres refuses to run as root. When the test binary runs as root (as
// CI does), initdb and postgres run as the "postgres" system user, which
// Debian's package creates: the helper sets the processes' credentials
// (SysProcAttr.Credential), chowns the server's directory to that user and
// makes the directory above it traversable. Without such a user the test
// fails with a message saying so.
package pgtest
