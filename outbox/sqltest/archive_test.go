package sqltest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/pgtest"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// archivedArgs are the arguments of the jobs whose trimmed dead records
// TestDeadTrimmedArchivedToPostgres archives.
type archivedArgs struct {
	N int `json:"n"`
}

// archiveSchema is the table of the recipe in docs/operations.md: the dead
// records the dead-letter store trims, kept in PostgreSQL (the outbox's
// database, say).
const archiveSchema = `CREATE TABLE IF NOT EXISTS delayq_dead_archive (
	queue      text        NOT NULL,
	id         text        NOT NULL,
	died_at    timestamptz NOT NULL,
	type       text        NOT NULL,
	trim       text        NOT NULL,
	trimmed_at timestamptz NOT NULL,
	attempts   integer     NOT NULL,
	reason     text        NOT NULL,
	error      text        NOT NULL,
	body       bytea       NOT NULL,
	PRIMARY KEY (queue, id, died_at)
)`

// archiveTrimmed is the recipe's hook: one INSERT per record, which a
// record handed again (it is not, but a retry of the INSERT may be)
// leaves as it was.
func archiveTrimmed(db *sql.DB, log zerolog.Logger) func(ctx context.Context, r *job.TrimmedRecord) {
	return func(ctx context.Context, r *job.TrimmedRecord) {
		_, err := db.ExecContext(ctx, `INSERT INTO delayq_dead_archive
			(queue, id, died_at, type, trim, trimmed_at, attempts, reason, error, body)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING`,
			r.Queue, r.ID, r.DiedAt, r.Type, r.Trim, r.TrimmedAt, r.Attempts, r.Reason, r.Error, r.Body)
		if err != nil {
			log.Error().Err(err).Str("queue", r.Queue).Str("job_id", r.ID).Msg("dead record not archived")
		}
	}
}

// TestDeadTrimmedArchivedToPostgres: the recipe of docs/operations.md
// archives every record the cap trims to PostgreSQL, with the envelope as
// stored (it decodes to the job) and the final error; the store keeps the
// newest.
func TestDeadTrimmedArchivedToPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	if _, err := db.Exec(archiveSchema); err != nil {
		t.Fatal(err)
	}
	tb := testkit.Setup(t, func(o *broker.Options) { o.DeadCap = 3 })
	typ := job.New[archivedArgs]("invoice.send")
	typ.Handle(tb.Reg, func(_ context.Context, j *job.Job[archivedArgs]) error {
		return retry.Permanent(fmt.Errorf("customer %d has no address", j.Args.N))
	})
	const deaths = 10
	for i := range deaths {
		if _, err := typ.Enqueue(tb.Ctx, tb.B, archivedArgs{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := tb.Config(t)
	cfg.OnDeadTrimmed = archiveTrimmed(db, *cfg.Logger)
	stop := testkit.StartWorker(t, cfg)
	count := func() int {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM delayq_dead_archive`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	redistest.WaitFor(t, 30*time.Second, "7 records archived", func() bool { return count() == deaths-3 })
	stop()

	rows, err := db.Query(`SELECT queue, id, type, trim, attempts, error, body, died_at, trimmed_at FROM delayq_dead_archive`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored, _, err := protocol.Dead(tb.B).Page(tb.Ctx, naming.DefaultQueue, protocol.DeadCursor{}, 10)
	if err != nil || len(stored) != 3 {
		t.Fatalf("store holds %d records (%v), want 3", len(stored), err)
	}
	kept := map[string]bool{}
	for _, r := range stored {
		kept[r.ID] = true
	}
	n := 0
	for rows.Next() {
		var queue, id, typeName, trim, errText string
		var attempts int
		var body []byte
		var died, trimmed time.Time
		if err := rows.Scan(&queue, &id, &typeName, &trim, &attempts, &errText, &body, &died, &trimmed); err != nil {
			t.Fatal(err)
		}
		env, err := job.Decode(body)
		if err != nil {
			t.Fatalf("archived body of %s does not decode: %v", id, err)
		}
		var p archivedArgs
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			t.Fatal(err)
		}
		switch {
		case kept[id]:
			t.Fatalf("job %s archived and still in the store", id)
		case queue != naming.DefaultQueue || typeName != "invoice.send" || trim != naming.TrimCap || attempts != 1:
			t.Fatalf("row %s: queue %s, type %s, trim %s, attempts %d", id, queue, typeName, trim, attempts)
		case errText != fmt.Sprintf("customer %d has no address", p.N):
			t.Fatalf("row %s: error %q, want the job's final error (customer %d)", id, errText, p.N)
		case trimmed.Before(died):
			t.Fatalf("row %s: trimmed at %v before it died at %v", id, trimmed, died)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != deaths-3 {
		t.Fatalf("%d rows, want %d", n, deaths-3)
	}
}
