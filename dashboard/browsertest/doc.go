// Package browsertest drives the dashboard in headless Chromium
// (TestBrowser): a module of its own, so that the core module does not
// require chromedp.
package browsertest
