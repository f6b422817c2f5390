// Package dashboard is a web UI for a delayq namespace: an http.Handler to
// mount in your own server, or to run with `delayq dashboard`.
//
// # Pages
//
//   - Overview: every queue with its scheduled, due, processing and dead
//     counts, the next ready time, and charts of the jobs handled per minute
//     and of their lateness over the last hour. It refreshes itself.
//   - Queue: scheduled jobs paged by ready time, jobs being processed with
//     the lease they have left, search by id, and the job detail (payload,
//     type, attempts, times, last error) with cancel and reschedule.
//   - Dead letters: filtered by queue, type and error text; the detail shows
//     the full error with its stack; redrive one or all that match, delete,
//     purge.
//
// Everything is in the binary: html/template pages, a stylesheet and a small
// script, embedded with go:embed; the charts are SVG drawn on the server.
// Counts come from O(log N) Redis calls (pipelined over queues), the charts
// from the per-minute history the broker's scripts keep (see
// docs/dashboard.md), never from a scan; a filtered dead-letter page reads at
// most Options.DeadMaxScan records and then offers to continue scanning.
//
// # Mounting
//
//	d, err := dashboard.New(b, dashboard.Options{Prefix: "/admin/delayq", BearerToken: token})
//	mux.Handle("/admin/delayq/", d)
//
// or on a listener of its own, loopback only unless told otherwise, with
// the `delayq dashboard` command.
//
// # Security
//
// Requests must name a loopback host (localhost, 127.0.0.0/8, ::1) or one of
// Options.AllowedHosts in their Host header, or get 421: a web page on a
// domain pointed at 127.0.0.1 (DNS rebinding) can neither read the dashboard
// nor act on it. List a reverse proxy's public name there.
//
// Without BearerToken or basic auth every request is admitted, so serve it
// on loopback or behind your own authentication. Every action is a POST that
// must pass net/http.CrossOriginProtection and carry a CSRF token: the HMAC,
// under Options.CSRFSecret, of an HttpOnly, SameSite=Strict session cookie
// (named __Host-delayq_csrf over TLS) and of the request's credentials, so a
// planted cookie is worthless; a form carries the token of every session
// cookie its page was sent, so one planted with a more specific path locks
// nobody out. Notices after an action are signed the same way. Over TLS,
// answers for names that are not loopback carry Strict-Transport-Security. ReadOnly hides and refuses every action.
// Destructive actions ask for confirmation (in the browser, and on a page of
// their own when scripts are off). Pages are served with a strict
// Content-Security-Policy and every value shown, payloads included, is
// HTML-escaped. JSON payloads and results are indented only within a depth
// and size bound, and shown as stored beyond it, so that rendering a page
// costs time and memory in proportion to the bytes it shows.
package dashboard
