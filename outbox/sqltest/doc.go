// Package sqltest holds the outbox's tests on real databases: every
// behavioural test runs on PostgreSQL (internal/pgtest) and on SQLite
// (modernc.org/sqlite), with the relay's metrics read through the
// OpenTelemetry SDK. It is a module of its own so that the core module
// requires no SQL driver and no SDK. Tests only, no code.
package sqltest
