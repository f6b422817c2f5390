// Package deadletter manages jobs that used up their retries or failed
// permanently: list them newest first with filters (queue, job type, error
// substring, died between) and a paging cursor, read one, send them back to
// the schedule (redrive: one id, a filter or all, in bounded batches, with
// attempts reset), delete them, and apply retention.
//
// Dead records are written by workers through the broker. Retention (a cap
// on records per queue and a max age, see broker.Options.DeadCap and
// DeadMaxAge) is applied each time a job dies and on [Inspector.Trim].
//
// Every method that takes a queue name also accepts "" for every known
// queue, except Get, Redrive and Delete, which address single records.
package deadletter
