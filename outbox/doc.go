// Package outbox makes "save the order and schedule its timeout" one
// commit: jobs are written into an outbox table of the application's own
// SQL database, inside the application's transaction, and a [Relay] moves
// the committed rows to Redis.
//
// A committed job reaches Redis at least once, and exactly once as a job
// thanks to its id: a replayed row gets broker.ErrDuplicate, which the
// relay counts as relayed, while the job is pending and, because the relay
// enqueues with job.Unique for RelayOptions.ReplayWindow, for that long
// after it ran; a rolled-back one never does. Cancel works the same way, in the transaction that, say,
// marks the order paid, whether or not the job has reached Redis yet.
//
//	ob, _ := outbox.New(db, outbox.Postgres, outbox.Options{})
//	_ = ob.Migrate(ctx)
//
//	tx, _ := db.BeginTx(ctx, nil)
//	_, _ = tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES ($1)", "1001")
//	_, _ = outbox.EnqueueTyped(ctx, ob, tx, CancelUnpaid, Order{ID: "1001"},
//		job.ID("order-1001"), job.In(30*time.Minute))
//	_ = tx.Commit()
//
//	relay, _ := outbox.NewRelay(ob, b, outbox.RelayOptions{})
//	go relay.Run(ctx) // alone, or beside a worker in the same process
//
// Besides enqueueing and cancelling through the broker, a running relay
// writes to Redis only its status, in the hash ns:outbox:relays (`delayq stats`
// and the dashboard show it), and its entry in the process registry (package fleet).
//
// The package uses database/sql only and imports no driver: open db with
// the driver of your choice and pass the matching [Dialect] ([Postgres] or
// [SQLite]). docs/outbox.md describes the guarantee, the schema, the
// relay's cost and lag, several relays at once, and SQLite's single
// writer.
package outbox
