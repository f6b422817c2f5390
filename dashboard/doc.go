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
// broker.History), never from a scan.
//
// # Mounting
//
//	d, err := dashboard.New(b, dashboard.Options{Prefix: "/admin/delayq", BearerToken: token})
//	mux.Handle("/admin/delayq/", d)
//
// or on a listener of its own, loopback only unless told otherwise:
//
//	err = dashboard.Serve(ctx, "127.0.0.1:8080", d, dashboard.ServeOptions{})
//
// # Security
//
// Without BearerToken or basic auth every request is admitted, so serve it
// on loopback or behind your own authentication. Every action is a POST that
// must pass net/http.CrossOriginProtection and repeat a CSRF token from an
// HttpOnly, SameSite=Strict cookie; ReadOnly hides and refuses every action.
// Destructive actions ask for confirmation (in the browser, and on a page of
// their own when scripts are off). Pages are served with a strict
// Content-Security-Policy and every value shown, payloads included, is
// HTML-escaped.
package dashboard
