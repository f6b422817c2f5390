// Package integration holds the dashboard's tests that need more than the
// core module: headless Chromium (TestBrowser, the screenshots) and outbox
// relays over SQLite (TestOverviewShowsOutboxRelays). It is a module of its
// own, so that the core does not require chromedp or an SQL driver.
package integration
