// Package deadletter manages jobs that used up their retries or failed
// permanently: list them newest first with filters (queue, job type, error
// substring, died between) and a paging cursor, read one, send them back to
// the schedule (redrive: one id, a filter or all, in bounded batches, with
// attempts reset), delete them, and apply retention.
//
//	dead := deadletter.New(b) // b is the *broker.Broker
//	page, err := dead.List(ctx, "sms", deadletter.ListOptions{
//		Filter: deadletter.Filter{Type: "sms.send", ErrorContains: "invalid phone"},
//	})
//	for _, r := range page.Records {
//		fmt.Println(r.ID, r.DiedAt, r.Attempts, r.Error)
//	}
//	// After fixing the cause: back to the schedule now, attempts reset.
//	err = dead.Redrive(ctx, "sms", 0, page.Records[0].ID)
//	// Or every match, in batches:
//	res, err := dead.RedriveAll(ctx, "sms", deadletter.Filter{Type: "sms.send"}, deadletter.BulkOptions{})
//
// A record keeps the job's envelope byte for byte (payload, type, retry
// budget), its final error (with the stack for a panic) and the attempts it
// spent. A redriven job runs with that payload again, so a fix that must
// reach it belongs in the data the payload refers to, or in the handler.
//
// # What a filter costs
//
// The store is indexed by the time a job died, so an unfiltered page reads
// only its own records, and DiedAfter stops the scan at its bound. Type and
// ErrorContains are tested in Go on records read newest first: a filter
// that matches little reads many records. One List call reads at most
// ListOptions.MaxScan of them (by default 10,000: about 60 ms with
// 100,000 records in the store, see BenchmarkListFiltered, where reading
// all of them takes about 0.7 s) and then returns what matched with
// Page.Partial set and a cursor that continues the scan. Count,
// RedriveAll and DeleteAll read every record that the filter's time bounds
// allow; without a filter, Count reads each queue's count and DeleteAll
// empties each queue's store in one step (the purge), reading no record.
//
// Dead records are written by workers through the broker. Retention (a cap
// on records per queue and a max age, see broker.Options.DeadCap and
// DeadMaxAge) is applied each time a job dies and on [Inspector.Trim].
// Every record dropped that way is counted per queue and reason
// (job.QueueStats.DeadTrimmedCap, DeadTrimmedAge), and a worker with
// worker.Options.OnDeadTrimmed is handed the records its trims drop; see
// docs/operations.md.
//
// Every method that takes a queue name also accepts "" for every known
// queue, except Get, Redrive and Delete, which address single records.
package deadletter
