// Package deadletter manages jobs that used up their retries or failed
// permanently: list them newest first with filters, read one, send them back
// to the schedule (redrive), delete them, and apply retention.
//
// Dead records are written by workers through the broker; retention (a cap
// on records per queue and a max age, see broker.Options) is applied each
// time a job dies and on [Inspector.Trim].
package deadletter
