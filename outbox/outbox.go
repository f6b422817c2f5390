package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// Options configure an Outbox. The zero value is usable.
type Options struct {
	// Table is the outbox table's name, optionally schema-qualified
	// ("jobs.outbox"): ASCII letters, digits and '_', at most 54 bytes per
	// part. Default "delayq_outbox".
	Table string

	// MaxPayloadBytes caps an envelope's payload, as the broker's option of
	// the same name does: keep them equal, or the relay marks rows over the
	// broker's cap failed. 0 means 1 MiB; negative means no cap.
	MaxPayloadBytes int
}

// Outbox writes jobs and cancels into an outbox table inside the caller's
// transactions; a [Relay] moves them to Redis. It is safe for concurrent
// use.
type Outbox struct {
	db      *sql.DB
	d       Dialect
	t       tableName
	maxBody int

	// Statements, built once for the table and dialect.
	insertIn, insertAt, deleteJob, insertCancel, lag string
}

// New returns an Outbox on db, whose SQL flavour is d. It checks the
// options but does not contact the database; create the table with
// [Outbox.Migrate] or the statements of [Outbox.Schema].
func New(db *sql.DB, d Dialect, opts Options) (*Outbox, error) {
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	if d.name == "" {
		return nil, invalid("no dialect: use outbox.Postgres() or outbox.SQLite()")
	}
	if opts.Table == "" {
		opts.Table = defaultTable
	}
	t, err := parseTable(opts.Table)
	if err != nil {
		return nil, err
	}
	if opts.MaxPayloadBytes == 0 {
		opts.MaxPayloadBytes = rules.DefaultMaxPayloadBytes
	}
	o := &Outbox{db: db, d: d, t: t, maxBody: opts.MaxPayloadBytes}
	name, p := t.full(), d.param
	o.insertIn = fmt.Sprintf("INSERT INTO %s (op, queue, job_id, envelope, payload, ready_at) VALUES ('enqueue', %s, %s, %s, %s, %s + %s) RETURNING ready_at",
		name, p(1), p(2), p(3), p(4), d.nowMS, p(5))
	o.insertAt = fmt.Sprintf("INSERT INTO %s (op, queue, job_id, envelope, payload, ready_at) VALUES ('enqueue', %s, %s, %s, %s, %s) RETURNING ready_at",
		name, p(1), p(2), p(3), p(4), p(5))
	o.deleteJob = fmt.Sprintf("DELETE FROM %s WHERE op = 'enqueue' AND queue = %s AND job_id = %s", name, p(1), p(2))
	o.insertCancel = fmt.Sprintf("INSERT INTO %s (op, queue, job_id) VALUES ('cancel', %s, %s)", name, p(1), p(2))
	o.lag = fmt.Sprintf("SELECT COUNT(CASE WHEN error IS NULL THEN 1 END), COUNT(error), MIN(CASE WHEN error IS NULL THEN created_at END), %s FROM %s",
		d.nowMS, name)
	return o, nil
}

// Schema returns the statements that create the outbox table and its index
// if they do not exist, for migration tools of your own.
func (o *Outbox) Schema() []string { return o.d.ddl(o.t) }

// Migrate creates the outbox table and its index if they do not exist, in
// one transaction. It is safe to run at every start.
func (o *Outbox) Migrate(ctx context.Context) error {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", o.t.full(), err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, stmt := range o.Schema() {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("outbox: migrate %s: %w", o.t.full(), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", o.t.full(), err)
	}
	return nil
}

// Enqueue writes env into the outbox inside tx: the job reaches Redis
// after tx commits, and never if it rolls back. It validates env as the
// broker's Enqueue does (errors wrap job.ErrInvalid, and nothing is
// written), generates an ID when env has none (job.NewID) and fills in
// env's ID, Queue, CreatedAt and ReadyAt.
//
// The ready time is absolute, on the database's clock: a delay (job.In)
// counts from this call, so a relay that runs late does not delay the job
// further, and job.At is kept as given. The relay hands Redis the time
// that is left when it moves the row, so no two machines' clocks are
// compared. ReadyAt is that ready time as the database stored it.
//
// The envelope is stored whole, with every job option the caller gave, and
// reaches the broker as it was, plus job.Unique for the relay's
// ReplayWindow. An id that is still pending in Redis when the row is
// relayed, or that ran within that window, is not enqueued a second time
// (broker.ErrDuplicate counts as relayed).
//
// A debounced envelope (job.Debounce) is refused, with an error wrapping
// job.ErrInvalid that names the conflict, and nothing is written: the
// relay enqueues the row later, with job.Unique for its ReplayWindow and a
// ready time of its own (what is left of its delay), and the broker
// refuses Debounce with either. Debounce on the broker directly, after the
// transaction commits.
func (o *Outbox) Enqueue(ctx context.Context, tx *sql.Tx, env *job.Envelope) error {
	if tx == nil {
		return invalid("nil transaction")
	}
	if env != nil && env.Debounce != 0 {
		return invalid("job %q of type %q has Debounce, which an outbox cannot relay: the relay enqueues the row later, with job.Unique for its ReplayWindow and a ready time of its own, and the broker refuses Debounce with either; debounce on the broker after the transaction commits", env.ID, env.Type)
	}
	if err := o.validate(env); err != nil {
		return err
	}
	meta, err := encodeEnvelope(env)
	if err != nil {
		return fmt.Errorf("outbox: encode job %q: %w", env.ID, err)
	}
	query, when := o.insertIn, ceilMS(env.Delay)
	if !env.At.IsZero() {
		query, when = o.insertAt, readyMS(env.At)
	}
	var ready int64
	if err := tx.QueryRowContext(ctx, query, env.Queue, env.ID, meta, nullBytes(env.Payload), when).Scan(&ready); err != nil {
		return fmt.Errorf("outbox: enqueue job %q in queue %q: %w", env.ID, env.Queue, err)
	}
	env.ReadyAt = time.UnixMilli(ready)
	return nil
}

// EnqueueTyped encodes args as a job of type t with opts, as t.Enqueue
// does, and writes it into the outbox inside tx (see [Outbox.Enqueue]; an
// option job.Debounce is refused there). It returns the envelope, with its
// ID and ReadyAt.
func EnqueueTyped[T any](ctx context.Context, o *Outbox, tx *sql.Tx, t *job.Type[T], args T, opts ...job.Option) (*job.Envelope, error) {
	if t == nil {
		return nil, invalid("nil job type")
	}
	env, err := t.Envelope(args, opts...)
	if err != nil {
		return nil, err
	}
	if err := o.Enqueue(ctx, tx, env); err != nil {
		return nil, err
	}
	return env, nil
}

// Cancel cancels the job with id in queue inside tx, whether or not it has
// reached Redis yet. If tx commits before the job starts, the job never
// runs:
//
//   - a row of the job still in the outbox is deleted, and the job never
//     reaches Redis; removed reports that;
//   - a cancel row is written in every case, which the relay applies with
//     broker.Cancel after everything written before it for that id, so a
//     job that was relayed already (or a second job with that id) is
//     removed from Redis too. Its outcome (cancelled, not found, in
//     progress) is counted and reported to RelayOptions.OnCancel.
//
// A job that a worker runs already is asked to stop, as broker.Cancel does
// (its handler's context is cancelled; counted in progress); a handler
// that finishes anyway has done its work, so its own state check decides
// then.
// Errors for a bad queue or id wrap job.ErrInvalid, and nothing is written.
func (o *Outbox) Cancel(ctx context.Context, tx *sql.Tx, queue, id string) (removed bool, err error) {
	if tx == nil {
		return false, invalid("nil transaction")
	}
	if err := naming.Queue(queue); err != nil {
		return false, err
	}
	if err := naming.ID(id); err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, o.deleteJob, queue, id)
	if err != nil {
		return false, fmt.Errorf("outbox: cancel job %q in queue %q: %w", id, queue, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("outbox: cancel job %q in queue %q: %w", id, queue, err)
	}
	if _, err := tx.ExecContext(ctx, o.insertCancel, queue, id); err != nil {
		return false, fmt.Errorf("outbox: cancel job %q in queue %q: %w", id, queue, err)
	}
	return n > 0, nil
}

// Lag is the state of the outbox at one instant of the database's clock.
type Lag struct {
	Pending int64         // rows waiting for the relay: jobs and cancels
	Oldest  time.Duration // how long the oldest of them has waited; 0 when none
	Failed  int64         // rows the relay marked failed and skips (see docs/outbox.md)
}

// Lag reads how far the relay is behind, in one query: the pending rows,
// the age of the oldest one and the failed rows. It counts the table's
// rows, which is cheap while the relay keeps up (the table is then nearly
// empty) and grows with the backlog.
func (o *Outbox) Lag(ctx context.Context) (Lag, error) {
	var (
		l      Lag
		oldest sql.NullInt64
		now    int64
	)
	if err := o.db.QueryRowContext(ctx, o.lag).Scan(&l.Pending, &l.Failed, &oldest, &now); err != nil {
		return Lag{}, fmt.Errorf("outbox: lag of %s: %w", o.t.full(), err)
	}
	if oldest.Valid && now > oldest.Int64 {
		l.Oldest = time.Duration(now-oldest.Int64) * time.Millisecond
	}
	return l, nil
}

// validate fills in env's defaults and checks it as broker.Enqueue does.
func (o *Outbox) validate(env *job.Envelope) error {
	if err := job.Prepare(env, time.Now()); err != nil {
		return err
	}
	if c := o.maxBody; c > 0 && len(env.Payload) > c {
		return fmt.Errorf("outbox: %w: %w: payload of job %q is %d bytes, the cap is %d", job.ErrInvalid, broker.ErrPayloadTooLarge, env.ID, len(env.Payload), c)
	}
	return nil
}

// encodeEnvelope returns the JSON of env without what the row's columns
// hold (ID, Queue, Payload) and the enqueue-time scheduling fields (Delay,
// At, ReadyAt), which the ready_at column replaces. Every other field,
// including any a later version of job.Envelope adds, is kept.
func encodeEnvelope(env *job.Envelope) (string, error) {
	c := *env
	c.ID, c.Queue, c.Payload = "", "", nil
	c.Delay, c.At, c.ReadyAt = 0, time.Time{}, time.Time{}
	b, err := json.Marshal(&c)
	return string(b), err
}

// decodeEnvelope is the inverse of encodeEnvelope.
func decodeEnvelope(meta string, queue, id string, payload []byte) (*job.Envelope, error) {
	env := new(job.Envelope)
	if err := json.Unmarshal([]byte(meta), env); err != nil {
		return nil, err
	}
	env.ID, env.Queue, env.Payload = id, queue, payload
	env.Delay, env.At, env.ReadyAt = 0, time.Time{}, time.Time{}
	return env, nil
}

// ceilMS returns d in whole milliseconds, rounded up, so that a job is
// never ready before the delay has passed.
func ceilMS(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// readyMS is an absolute ready time in whole ms, rounded up, at least 1.
func readyMS(t time.Time) int64 {
	v := t.UnixMilli()
	if t.After(time.UnixMilli(v)) {
		v++
	}
	return max(v, 1)
}

// nullBytes stores an empty payload as NULL.
func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("outbox: %w: %s", job.ErrInvalid, fmt.Sprintf(format, args...))
}

// errorsIsAny reports whether err wraps any of targets.
func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
