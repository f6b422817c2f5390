package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

func (a *app) jobsCommand() *cobra.Command {
	return group("jobs", "List, show, cancel and reschedule scheduled and processing jobs",
		a.jobsLsCommand(), a.jobsShowCommand(), a.jobsCancelCommand(), a.jobsRescheduleCommand())
}

// jobJSON is a job in JSON output.
type jobJSON struct {
	ID               string            `json:"id"`
	Queue            string            `json:"queue"`
	State            string            `json:"state"`
	Type             string            `json:"type,omitempty"`
	Payload          any               `json:"payload,omitempty"`
	Attempts         int               `json:"attempts"`
	MaxRetries       *int              `json:"max_retries,omitempty"`
	ReadyAt          *string           `json:"ready_at,omitempty"`
	LeaseDeadline    *string           `json:"lease_deadline,omitempty"`
	LeaseRemainingMS *int64            `json:"lease_remaining_ms,omitempty"`
	DiedAt           *string           `json:"died_at,omitempty"`
	CreatedAt        *string           `json:"created_at,omitempty"`
	TimeoutMS        int64             `json:"timeout_ms,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	LastError        string            `json:"last_error,omitempty"`
	Corrupt          string            `json:"corrupt,omitempty"` // why the envelope does not decode
	Body             string            `json:"body_base64,omitempty"`
	// A succeeded job kept with its result (job.Retain): the result as
	// text when it is UTF-8, else as base64; its length in bytes either way.
	Result       *string       `json:"result,omitempty"`
	ResultBase64 string        `json:"result_base64,omitempty"`
	ResultBytes  *int          `json:"result_bytes,omitempty"`
	StartedAt    *string       `json:"started_at,omitempty"`
	FinishedAt   *string       `json:"finished_at,omitempty"`
	ExpiresAt    *string       `json:"expires_at,omitempty"`
	Progress     *progressJSON `json:"progress,omitempty"`
	// The jobs enqueued when it succeeds (job.Then).
	Next []nextJSON `json:"next,omitempty"`
}

// nextJSON is a next job of a chain, as its parent declares it.
type nextJSON struct {
	Type    string  `json:"type"`
	Queue   string  `json:"queue"`
	ID      string  `json:"id,omitempty"` // empty: derived from the parent's
	DelayMS int64   `json:"delay_ms,omitempty"`
	ReadyAt *string `json:"ready_at,omitempty"`
	Then    int     `json:"then,omitempty"` // next jobs of its own
}

// progressJSON is the last progress a handler reported.
type progressJSON struct {
	Fraction float64 `json:"fraction"`
	Message  string  `json:"message,omitempty"`
	At       *string `json:"at,omitempty"`
}

func toJobJSON(j *job.JobInfo) jobJSON {
	out := jobJSON{ID: j.ID, Queue: j.Queue, State: string(j.State), Attempts: j.Attempts,
		ReadyAt: jsonTime(j.ReadyAt), LeaseDeadline: jsonTime(j.LeaseDeadline)}
	if j.State == job.StateProcessing {
		ms := max(j.LeaseDeadline.Sub(j.Now), 0).Milliseconds()
		out.LeaseRemainingMS = &ms
	}
	if j.Dead != nil {
		out.DiedAt = jsonTime(j.Dead.DiedAt)
		out.LastError = j.Dead.Error
	}
	if j.State == job.StateSucceeded {
		out.StartedAt, out.FinishedAt, out.ExpiresAt = jsonTime(j.StartedAt), jsonTime(j.FinishedAt), jsonTime(j.ExpiresAt)
		if j.Result != nil {
			n := len(j.Result)
			out.ResultBytes = &n
			if utf8.Valid(j.Result) {
				r := string(j.Result)
				out.Result = &r
			} else {
				out.ResultBase64 = base64.StdEncoding.EncodeToString(j.Result)
			}
		}
	}
	if p := j.Progress; p != nil {
		out.Progress = &progressJSON{Fraction: p.Fraction, Message: p.Message, At: jsonTime(p.At)}
	}
	if e := j.Envelope; e != nil {
		out.Type, out.Payload, out.Headers = e.Type, payloadJSON(e.Payload), e.Headers
		mr := e.MaxRetries
		out.MaxRetries = &mr
		out.CreatedAt = jsonTime(e.CreatedAt)
		out.TimeoutMS = e.Timeout.Milliseconds()
		if out.LastError == "" {
			out.LastError = e.LastError
		}
		for _, n := range e.Next {
			out.Next = append(out.Next, nextJSON{Type: n.Type, Queue: queueOr(n.Queue), ID: n.ID,
				DelayMS: n.Delay.Milliseconds(), ReadyAt: jsonTime(n.At), Then: len(n.Next)})
		}
	} else {
		if j.Err != nil {
			out.Corrupt = j.Err.Error()
		}
		out.Body = base64.StdEncoding.EncodeToString(j.Body)
	}
	return out
}

// nextText describes a next job of a chain in one line.
func nextText(n *job.Envelope) string {
	id := n.ID
	if id == "" {
		id = "(id from this job's)"
	}
	s := n.Type + " " + id + " in queue " + queueOr(n.Queue)
	switch {
	case !n.At.IsZero():
		s += ", ready at " + fmtTime(n.At)
	case n.Delay > 0:
		s += ", " + fmtDur(n.Delay) + " after this job succeeds"
	}
	if len(n.Next) > 0 {
		s += fmt.Sprintf(", then %d more", len(n.Next))
	}
	return s
}

// queueOr is q, or the default queue's name when it is empty.
func queueOr(q string) string {
	if q == "" {
		return naming.DefaultQueue
	}
	return q
}

func jobType(j *job.JobInfo) string {
	if j.Envelope == nil {
		return "(corrupt)"
	}
	return j.Envelope.Type
}

// when describes a job's time for people.
func when(j *job.JobInfo) string {
	switch j.State {
	case job.StateScheduled:
		if j.ReadyAt.After(j.Now) {
			return "ready " + relative(j.ReadyAt, j.Now)
		}
		return "due " + relative(j.ReadyAt, j.Now)
	case job.StateProcessing:
		if r := j.LeaseDeadline.Sub(j.Now); r > 0 {
			return "lease " + fmtDur(r) + " left"
		}
		return "lease expired " + relative(j.LeaseDeadline, j.Now)
	case job.StateDead:
		return "died " + relative(j.Dead.DiedAt, j.Now)
	case job.StateSucceeded:
		return "finished " + relative(j.FinishedAt, j.Now)
	}
	return "-"
}

func jobTime(j *job.JobInfo) time.Time {
	switch j.State {
	case job.StateScheduled:
		return j.ReadyAt
	case job.StateProcessing:
		return j.LeaseDeadline
	case job.StateDead:
		return j.Dead.DiedAt
	case job.StateSucceeded:
		return j.FinishedAt
	}
	return time.Time{}
}

// jobsCursor is the position of "jobs ls": processing jobs come first, then
// scheduled ones; the cursor says which list it is in, and where in it (a
// page cursor of the broker's, "" for the list's start).
type jobsCursor struct {
	state job.JobState
	pos   string
}

func (c jobsCursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(string(c.state) + ":" + c.pos))
}

// decodeJobsCursor reads a cursor encode made; the broker checks its
// position when the page is read (fillJobs).
func decodeJobsCursor(s string) (jobsCursor, error) {
	bad := usagef("invalid --cursor %q: use the value a previous page printed", s)
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return jobsCursor{}, bad
	}
	st, pos, ok := strings.Cut(string(raw), ":")
	if !ok || (st != string(job.StateScheduled) && st != string(job.StateProcessing)) {
		return jobsCursor{}, bad
	}
	return jobsCursor{state: job.JobState(st), pos: pos}, nil
}

func (a *app) jobsLsCommand() *cobra.Command {
	var (
		queue, state, cursor string
		limit                int
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List processing jobs (by lease deadline), then scheduled jobs (by ready time)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkQueue(queue); err != nil {
				return err
			}
			var lists []job.JobState
			switch state {
			case "all":
				lists = []job.JobState{job.StateProcessing, job.StateScheduled}
			case "scheduled", "processing":
				lists = []job.JobState{job.JobState(state)}
			default:
				return usagef("invalid --state %q: want all, scheduled or processing", state)
			}
			if limit <= 0 || limit > admin.MaxPageLimit {
				return usagef("invalid --limit %d: want 1..%d", limit, admin.MaxPageLimit)
			}
			var cur jobsCursor
			if cursor != "" && cmd.Flags().Changed("queue") {
				c, err := decodeJobsCursor(cursor)
				if err != nil {
					return err
				}
				cur = c
				for len(lists) > 0 && lists[0] != c.state {
					lists = lists[1:]
				}
				if len(lists) == 0 {
					return usagef("invalid --cursor: it belongs to --state %s", c.state)
				}
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("queue") {
				return a.listAllJobs(cmd.Context(), b, lists, cursor, limit)
			}
			return a.listJobs(cmd.Context(), b, queue, lists, cur, limit)
		},
	}
	f := cmd.Flags()
	queueFlag(f, &queue, naming.DefaultQueue, "only this queue (default every queue, by name)")
	f.StringVar(&state, "state", "all", "all, scheduled or processing")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions([]string{"all", "scheduled", "processing"}, cobra.ShellCompDirectiveNoFileComp))
	f.IntVar(&limit, "limit", 50, "jobs per page")
	f.StringVar(&cursor, "cursor", "", "continue after a previous page")
	return cmd
}

func (a *app) listJobs(ctx context.Context, b *broker.Broker, queue string, lists []job.JobState, cur jobsCursor, limit int) error {
	jobs, now, next, err := fillJobs(ctx, b, queue, lists, cur, limit)
	if err != nil {
		return err
	}
	return a.printJobs(jobs, now, next, "", "no jobs in queue "+queue)
}

// listAllJobs is "jobs ls" without --queue: the queues in name order, each
// as listJobs lists one, on pages that run on from one queue to the next.
// The cursor is "<queue>:" before a one-queue cursor. A queue with no jobs
// costs one read a list (processing, scheduled).
func (a *app) listAllJobs(ctx context.Context, b *broker.Broker, lists []job.JobState, cursor string, limit int) error {
	bad := usagef("invalid --cursor %q: use the value a previous page printed", cursor)
	var from string
	var cur jobsCursor
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		q, rest, ok := strings.Cut(string(raw), "/")
		if err != nil || !ok || naming.Queue(q) != nil {
			return bad
		}
		if cur, err = decodeJobsCursor(rest); err != nil {
			return bad
		}
		if !slices.Contains(lists, cur.state) {
			return usagef("invalid --cursor: it belongs to --state %s", cur.state)
		}
		from = q
	}
	names, err := protocol.Admin(b).Queues(ctx)
	if err != nil {
		return err
	}
	names = slices.DeleteFunc(names, func(q string) bool { return naming.Queue(q) != nil || q < from })
	slices.Sort(names)
	var (
		jobs []*job.JobInfo
		now  time.Time
		next string
	)
	for i, q := range names {
		ls, c := lists, jobsCursor{}
		if q == from {
			c = cur
			for len(ls) > 0 && ls[0] != c.state {
				ls = ls[1:]
			}
		}
		page, at, n, err := fillJobs(ctx, b, q, ls, c, limit-len(jobs))
		if err != nil {
			return err
		}
		jobs, now = append(jobs, page...), at
		if n != "" {
			next = base64.RawURLEncoding.EncodeToString([]byte(q + "/" + n))
			break
		}
		if len(jobs) == limit {
			if i+1 < len(names) {
				next = base64.RawURLEncoding.EncodeToString([]byte(names[i+1] + "/" + jobsCursor{state: lists[0]}.encode()))
			}
			break
		}
	}
	if now.IsZero() {
		if now, err = a.serverNow(ctx, b); err != nil {
			return err
		}
	}
	return a.printJobs(jobs, now, next, "QUEUE", fmt.Sprintf("no jobs in any of the %d queues of namespace %s", len(names), b.Namespace()))
}

// fillJobs reads up to limit jobs of queue from lists, starting at cur; next
// is the cursor of what follows, "" at the end of the lists.
func fillJobs(ctx context.Context, b *broker.Broker, queue string, lists []job.JobState, cur jobsCursor, limit int) (jobs []*job.JobInfo, now time.Time, next string, err error) {
	for i, st := range lists {
		pos := ""
		if cur.state == st {
			pos = cur.pos
		}
		p, err := b.Page(ctx, queue, st, pos, limit-len(jobs))
		if errors.Is(err, broker.ErrBadCursor) {
			return nil, time.Time{}, "", usagef("invalid --cursor: use the value a previous page printed")
		}
		if err != nil {
			return nil, time.Time{}, "", err
		}
		now = p.Now
		jobs = append(jobs, p.Jobs...)
		if p.Next != "" {
			next = jobsCursor{state: st, pos: p.Next}.encode()
			break
		}
		if len(jobs) == limit {
			// Full page: the next list starts from its beginning.
			if i+1 < len(lists) {
				next = jobsCursor{state: lists[i+1]}.encode()
			}
			break
		}
	}
	return jobs, now, next, nil
}

// printJobs prints a page of jobs: with a QUEUE column when queueCol is
// set, or empty when there are none.
func (a *app) printJobs(jobs []*job.JobInfo, now time.Time, next, queueCol, empty string) error {
	if a.json {
		out := struct {
			Now  *string   `json:"now"`
			Jobs []jobJSON `json:"jobs"`
			Next string    `json:"next,omitempty"`
		}{Now: jsonTime(now), Jobs: make([]jobJSON, len(jobs))}
		for i, j := range jobs {
			out.Jobs[i] = toJobJSON(j)
		}
		out.Next = next
		return a.printJSON(out)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(a.stdout, empty)
		return nil
	}
	if queueCol == "" {
		t := newTable(a.stdout, "ID", "TYPE", "STATE", "AT", "WHEN", "ATTEMPTS")
		for _, j := range jobs {
			t.row(j.ID, jobType(j), string(j.State), fmtTime(jobTime(j)), when(j), strconv.Itoa(j.Attempts))
		}
		return a.flushPage(t, next)
	}
	t := newTable(a.stdout, queueCol, "ID", "TYPE", "STATE", "AT", "WHEN", "ATTEMPTS")
	for _, j := range jobs {
		t.row(j.Queue, j.ID, jobType(j), string(j.State), fmtTime(jobTime(j)), when(j), strconv.Itoa(j.Attempts))
	}
	return a.flushPage(t, next)
}

func (a *app) jobsShowCommand() *cobra.Command {
	return a.showCommand("Show one job: state, envelope, ready time or lease, attempts", hasJob,
		func(ctx context.Context, b *broker.Broker, queue, id string) error {
			j, err := b.Job(ctx, queue, id)
			if err != nil {
				return notFound(err)
			}
			if a.json {
				return a.printJSON(toJobJSON(j))
			}
			return a.showJob(j)
		})
}

// notFound rewords the broker's errors about a job's state for people.
func notFound(err error) error {
	switch {
	case errors.Is(err, broker.ErrNotFound):
		return fmt.Errorf("not found: %s", strings.TrimPrefix(err.Error(), broker.ErrNotFound.Error()+": "))
	case errors.Is(err, broker.ErrInProgress):
		return fmt.Errorf("%s is in progress: a worker holds it, so it can no longer be changed", strings.TrimPrefix(err.Error(), broker.ErrInProgress.Error()+": "))
	}
	return err
}

func (a *app) showJob(j *job.JobInfo) error {
	t := newDetails(a.stdout, j.ID, j.Queue)
	t.row("State:", string(j.State))
	switch j.State {
	case job.StateScheduled:
		t.row("Ready:", fmtTime(j.ReadyAt)+" ("+when(j)+")")
	case job.StateProcessing:
		t.row("Lease until:", fmtTime(j.LeaseDeadline)+" ("+when(j)+")")
	case job.StateDead:
		t.row("Died:", fmtTime(j.Dead.DiedAt)+" ("+relative(j.Dead.DiedAt, j.Now)+")")
	case job.StateSucceeded:
		t.row("Started:", whenAt(j.StartedAt, j.Now))
		took := ""
		if !j.StartedAt.IsZero() && !j.FinishedAt.IsZero() {
			took = ", took " + fmtDur(j.FinishedAt.Sub(j.StartedAt))
		}
		t.row("Finished:", fmtTime(j.FinishedAt)+" ("+relative(j.FinishedAt, j.Now)+took+")")
		t.row("Expires:", whenAt(j.ExpiresAt, j.Now))
		t.row("Result:", resultText(j.Result))
	}
	if p := j.Progress; p != nil {
		t.row("Progress:", progressText(p, j.Now))
	}
	e := j.Envelope
	if e == nil {
		t.row("Attempts:", strconv.Itoa(j.Attempts))
		t.row("Corrupt:", oneLine(fmt.Sprint(j.Err)))
		t.body(j.Body)
		return t.flush()
	}
	t.row("Type:", e.Type)
	t.row("Attempts:", fmt.Sprintf("%d of %d", j.Attempts, e.MaxRetries+1))
	t.row("Created:", fmtTime(e.CreatedAt))
	if e.Timeout > 0 {
		t.row("Timeout:", fmtDur(e.Timeout))
	}
	t.headers(e.Headers)
	lastErr := e.LastError
	if j.Dead != nil {
		lastErr = j.Dead.Error
	}
	t.row("Last error:", orDash(clip(lastErr, 200)))
	t.row("Payload:", payloadText(e.Payload))
	for i, n := range e.Next {
		label := ""
		if i == 0 {
			label = "Then:"
		}
		t.row(label, nextText(n))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if j.State == job.StateDead {
		fmt.Fprintf(a.stdout, "\nThe job is dead: see 'delayq dead show %s --queue %s' for its full error.\n", termSafe(j.ID, false), j.Queue)
	}
	return nil
}

func (a *app) jobsCancelCommand() *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "cancel ID...",
		Short: "Cancel jobs: scheduled ones never run, running ones are told to stop",
		Long: `Cancel jobs. A scheduled job is removed: it never runs. A job a worker is
running is cancelled too: the worker is told at once (and its heartbeat
finds the request within a third of the lease if the notice was missed), the
handler's context is cancelled, and the job ends in the dead letters as
cancelled once the handler returns an error; a handler that still returns nil
has done its work and the job is acknowledged. Each line says whether the job
was running.`,
		Args: minArgs(1, "at least one job id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.brokerFor(cmd.Context(), queue, args)
			if err != nil {
				return err
			}
			return a.eachID(args, "cancelled", func(id string) (string, error) {
				res, err := b.Cancel(cmd.Context(), queue, id)
				if err != nil {
					return "", notFound(err)
				}
				if res.Running {
					return ": it was running; its worker was told to stop", nil
				}
				return ": it was scheduled and will never run", nil
			})
		},
	}
	queueFlag(cmd.Flags(), &queue, naming.DefaultQueue, "queue")
	return cmd
}

// eachID runs f on each id, reports each outcome and fails if any failed.
// verb names the success ("cancelled"); f may return a detail.
func (a *app) eachID(ids []string, verb string, f func(id string) (string, error)) error {
	type result struct {
		ID     string `json:"id"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail,omitempty"`
		Error  string `json:"error,omitempty"`
	}
	var (
		results []result
		first   error
		failed  int
	)
	for _, id := range ids {
		detail, err := f(id)
		r := result{ID: id, OK: err == nil, Detail: detail}
		if err != nil {
			r.Error = err.Error()
			failed++
			if first == nil {
				first = err
			}
		}
		results = append(results, r)
		if !a.json && err == nil {
			fmt.Fprintf(a.stdout, "%s %s%s\n", verb, termSafe(id, false), termSafe(detail, false))
		}
	}
	if a.json {
		if err := a.printJSON(results); err != nil {
			return err
		}
	}
	switch {
	case failed == 0:
		return nil
	case len(ids) == 1:
		return first
	default:
		return fmt.Errorf("%d of %d failed, first: %w", failed, len(ids), first)
	}
}

func (a *app) jobsRescheduleCommand() *cobra.Command {
	var (
		queue, in, at string
	)
	cmd := &cobra.Command{
		Use:   "reschedule ID (--in DURATION | --at TIME)",
		Short: "Move a scheduled job to a new ready time",
		Args:  exactArgs(1, "one job id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTarget(queue, args); err != nil {
				return err
			}
			if (in == "") == (at == "") {
				return usagef("give exactly one of --in and --at")
			}
			var (
				delay time.Duration
				abs   time.Time
				err   error
			)
			if in != "" {
				delay, err = parseIn(in)
			} else {
				abs, err = parseAt(at)
			}
			if err != nil {
				return err
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("queue") {
				if queue, err = a.locate(cmd.Context(), b, args[0]); err != nil {
					return err
				}
			}
			if in != "" {
				// The broker's reschedule takes an instant: add the delay to
				// the server's clock.
				now, err := a.serverNow(cmd.Context(), b)
				if err != nil {
					return err
				}
				abs = now.Add(delay)
				if delay == 0 {
					abs = time.Time{} // now
				}
			}
			ready, err := b.Reschedule(cmd.Context(), queue, args[0], abs)
			if err != nil {
				return notFound(err)
			}
			if a.json {
				return a.printJSON(map[string]any{"id": args[0], "queue": queue, "ready_at": jsonTime(ready)})
			}
			_, err = fmt.Fprintf(a.stdout, "rescheduled %s to %s\n", termSafe(args[0], false), fmtTime(ready))
			return err
		},
	}
	f := cmd.Flags()
	queueFlag(f, &queue, naming.DefaultQueue, "queue (default: the one queue that holds the id, searched in every queue)")
	f.StringVar(&in, "in", "", "ready this long from now (e.g. 10s, 1h30m)")
	f.StringVar(&at, "at", "", "ready at this RFC 3339 time")
	return cmd
}

// serverNow is the clock the scripts use: --now, else the server's TIME.
func (a *app) serverNow(ctx context.Context, b *broker.Broker) (time.Time, error) {
	if a.clock != nil {
		return a.clock(), nil
	}
	return b.Client().Time(ctx).Result()
}

func (a *app) enqueueCommand() *cobra.Command {
	var (
		queue, typ, payload, in, at, id string
		traceparent, tracestate         string
		maxRetries                      int
	)
	cmd := &cobra.Command{
		Use:   "enqueue --type TYPE --payload JSON [--queue Q] [--in D | --at TIME] [--id ID]",
		Short: "Enqueue one job",
		Long: `Enqueue one job. The payload is JSON, given inline or, with --payload -,
read from standard input. It prints the job's id and ready time. An id that
is still pending fails with exit status 1 and leaves the pending job as it is.

Retries: the job is tried at most 1 + --max-retries times, default ` + strconv.Itoa(naming.DefaultMaxRetries) + `
(delayq's default), not the count its type declares in code (job.MaxRetries):
that lives in the application's binary, which the CLI cannot read, so give
--max-retries to match it. The wait between attempts is the type's own, as
the worker that runs it applies it.

Tracing: with --traceparent (default: the TRACEPARENT environment variable,
and TRACESTATE beside it, as other command-line tools pass a trace on) the
job carries that W3C trace context, so the consumer span of its worker's
middleware.Tracing joins the caller's trace; without it the job starts a
trace of its own.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkQueue(queue); err != nil {
				return err
			}
			if err := naming.Type(typ); err != nil {
				return usagef("invalid --type: %v", err)
			}
			if id != "" {
				if err := checkIDs([]string{id}); err != nil {
					return err
				}
			}
			if maxRetries < 0 {
				return usagef("invalid --max-retries %d: must not be negative", maxRetries)
			}
			if in != "" && at != "" {
				return usagef("give at most one of --in and --at")
			}
			env := &job.Envelope{ID: id, Queue: queue, Type: typ, MaxRetries: maxRetries}
			if !cmd.Flags().Changed("traceparent") {
				traceparent, tracestate = a.getenv("TRACEPARENT"), a.getenv("TRACESTATE")
			}
			if traceparent != "" {
				carrier := propagation.MapCarrier{"traceparent": traceparent}
				if tracestate != "" {
					carrier["tracestate"] = tracestate
				}
				ctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
				if !trace.SpanContextFromContext(ctx).IsValid() {
					return usagef("invalid trace context %q: want a W3C traceparent, 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>", traceparent)
				}
				env.Headers = map[string]string{}
				propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(env.Headers))
			}
			var err error
			if in != "" {
				if env.Delay, err = parseIn(in); err != nil {
					return err
				}
			}
			if at != "" {
				if env.At, err = parseAt(at); err != nil {
					return err
				}
			}
			body := []byte(payload)
			if payload == "-" {
				if body, err = io.ReadAll(a.stdin); err != nil {
					return fmt.Errorf("read payload from standard input: %w", err)
				}
			}
			if !json.Valid(body) {
				var v any
				err := json.Unmarshal(body, &v)
				return usagef("invalid --payload: not JSON: %v", err)
			}
			// Typed or piped JSON is stored compact, so it stays readable
			// in Redis (other bytes would be kept as base64).
			var compact bytes.Buffer
			if err := json.Compact(&compact, body); err != nil {
				return usagef("invalid --payload: %v", err)
			}
			env.Payload = compact.Bytes()
			if a.clock != nil {
				env.CreatedAt = a.clock()
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := b.Enqueue(cmd.Context(), env); err != nil {
				if errors.Is(err, broker.ErrDuplicate) {
					return fmt.Errorf("job id %q is already pending in queue %q; nothing changed", env.ID, queue)
				}
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"id": env.ID, "queue": env.Queue, "ready_at": jsonTime(env.ReadyAt),
					"max_retries": env.MaxRetries, "max_retries_default": !cmd.Flags().Changed("max-retries")})
			}
			retries := fmt.Sprintf("%d retries", env.MaxRetries)
			if !cmd.Flags().Changed("max-retries") {
				retries += " (the default: the CLI does not know the type's own job.MaxRetries; give --max-retries)"
			}
			_, err = fmt.Fprintf(a.stdout, "enqueued %s in queue %s, ready at %s, %s\n", termSafe(env.ID, false), env.Queue, fmtTime(env.ReadyAt), retries)
			return err
		},
	}
	f := cmd.Flags()
	queueFlag(f, &queue, naming.DefaultQueue, "queue")
	f.StringVarP(&typ, "type", "t", "", "job type (required)")
	f.StringVarP(&payload, "payload", "p", "", "payload as JSON, or - to read it from standard input (required)")
	f.StringVar(&in, "in", "", "ready this long from now (e.g. 10s, 1h30m)")
	f.StringVar(&at, "at", "", "ready at this RFC 3339 time")
	f.StringVar(&id, "id", "", "job id (default: generated); unique among pending jobs of the queue")
	f.IntVar(&maxRetries, "max-retries", naming.DefaultMaxRetries, "retries after the first attempt (the type's job.MaxRetries is not known to the CLI)")
	f.StringVar(&traceparent, "traceparent", "", "W3C trace context the job carries, so its run joins that trace (default: $TRACEPARENT)")
	f.StringVar(&tracestate, "tracestate", "", "W3C trace state beside --traceparent (default: $TRACESTATE)")
	_ = cmd.MarkFlagRequired("type")
	_ = cmd.MarkFlagRequired("payload")
	return cmd
}

// resultText is a succeeded job's result for people: the text when it is
// UTF-8, else its length and base64; "-" when the handler set none.
func resultText(r []byte) string {
	switch {
	case r == nil:
		return "- (none set)"
	case utf8.Valid(r):
		return string(r)
	default:
		return fmt.Sprintf("%d bytes, not UTF-8: base64:%s", len(r), base64.StdEncoding.EncodeToString(r))
	}
}

// progressText is a handler's last progress report: "42% resizing (3s ago)".
func progressText(p *job.Progress, now time.Time) string {
	s := percent(p.Fraction) + "%"
	if p.Message != "" {
		s += " " + p.Message
	}
	return s + " (" + relative(p.At, now) + ")"
}

// percent writes a fraction 0..1 as a percentage to one decimal, without a
// trailing ".0": 0.425 is "42.5", 0.42 is "42".
func percent(f float64) string {
	return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64)
}

// finder reports whether queue holds job id: nil when it does, an error
// wrapping broker.ErrNotFound when it does not.
type finder func(ctx context.Context, b *broker.Broker, queue, id string) error

// hasJob finds a job in any state broker.Job reports (scheduled,
// processing, dead, or succeeded and retained).
func hasJob(ctx context.Context, b *broker.Broker, queue, id string) error {
	_, err := b.Job(ctx, queue, id)
	return err
}

// locate returns the queue that holds job id (pending, or dead) when no
// --queue was given; see locateWith.
func (a *app) locate(ctx context.Context, b *broker.Broker, id string) (string, error) {
	return a.locateWith(ctx, b, id, hasJob)
}

// locateWith returns the queue in which has finds job id: every known
// queue is searched, one read each. An id found in no queue, or in
// several, is an error naming them.
func (a *app) locateWith(ctx context.Context, b *broker.Broker, id string, has finder) (string, error) {
	names, err := protocol.Admin(b).Queues(ctx)
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	var found []string
	for _, q := range names {
		if naming.Queue(q) != nil {
			continue
		}
		err := has(ctx, b, q, id)
		switch {
		case err == nil:
			found = append(found, q)
		case errors.Is(err, broker.ErrNotFound):
		default:
			return "", err
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("job %q not found in any of the %d queues of namespace %s", id, len(names), b.Namespace())
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("job id %q is in %d queues (%s): give --queue", id, len(found), strings.Join(found, ", "))
}
