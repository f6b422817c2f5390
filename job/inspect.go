package job

import "time"

// JobState is where a job is in its life.
type JobState string

// States a job can be found in.
const (
	StateScheduled  JobState = "scheduled"  // waiting for its ready time, or due and not yet claimed
	StateProcessing JobState = "processing" // leased to a worker
	StateDead       JobState = "dead"       // in the dead-letter store
	StateSucceeded  JobState = "succeeded"  // succeeded and retained (job.Retain)
)

// JobInfo is one job as the inspection API sees it, read at one instant of
// the server's clock.
type JobInfo struct {
	ID    string
	Queue string
	State JobState
	Now   time.Time // the server's clock at the read

	// ReadyAt (StateScheduled): when it is (or was) due. Now − ReadyAt,
	// when over 0, is how long it has waited due.
	ReadyAt time.Time
	// LeaseDeadline (StateProcessing): when its lease runs out.
	// LeaseDeadline − Now is the lease left; at 0 or below it ran out,
	// and a worker takes the job back.
	LeaseDeadline time.Time
	Attempts      int // attempts spent (claims, less releases)

	Body     []byte    // the envelope as stored (the record's body when dead)
	Envelope *Envelope // Body decoded; nil when Err is set
	Err      error     // Body did not decode: wraps job.ErrCorrupt

	Dead *DeadRecord // StateDead: the dead record, with DiedAt

	// StateSucceeded (a job kept by Retain):
	Result     []byte    // what the handler set with SetResult; nil when none
	StartedAt  time.Time // when the succeeding attempt was claimed (the server's clock)
	FinishedAt time.Time // when it was acknowledged (the server's clock)
	ExpiresAt  time.Time // when the kept record goes

	// Progress is the last one the handler reported (ReportProgress):
	// while StateProcessing, and kept with StateSucceeded; nil when none.
	Progress *Progress
}

// DeadRecord is a job that used up its retries or failed permanently.
type DeadRecord struct {
	ID       string
	Queue    string
	Type     string    // job type, "" when the envelope was corrupt
	Body     []byte    // the envelope as it was stored
	Envelope *Envelope // Body decoded; nil when it does not decode
	Error    string    // the final error (with a stack trace for panics)
	Reason   string    // why it died when not by its error: "expired"; "" otherwise
	Attempts int       // attempts spent
	DiedAt   time.Time // server time; from the dead index
}

// TrimmedRecord is a dead record that the dead-letter store dropped by its
// cap or its max age, as a worker's hook receives it
// (worker.Options.OnDeadTrimmed): the whole record (its envelope and final
// error), why it was trimmed, and when.
type TrimmedRecord struct {
	DeadRecord
	// Trim says why: "cap", the store was at its cap
	// (broker.Options.DeadCap) and the oldest record made room; "age",
	// the record was older than broker.Options.DeadMaxAge.
	Trim      string
	TrimmedAt time.Time // server time
}
