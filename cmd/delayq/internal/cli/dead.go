package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

func (a *app) deadCommand() *cobra.Command {
	return group("dead", "List, show, redrive and delete dead jobs; purge and trim the dead-letter store",
		a.deadLsCommand(), a.deadShowCommand(), a.deadRedriveCommand(), a.deadRmCommand(),
		a.deadPurgeCommand(), a.deadTrimCommand())
}

// filterFlags are the record filters shared by ls, redrive and rm.
type filterFlags struct {
	queue, typ, errSub, since, until string
}

func (ff *filterFlags) add(fs *pflag.FlagSet, queueUsage string) {
	queueFlag(fs, &ff.queue, "", queueUsage)
	fs.StringVarP(&ff.typ, "type", "t", "", "only jobs of this type")
	fs.StringVar(&ff.errSub, "error", "", "only jobs whose final error contains this text")
	fs.StringVar(&ff.since, "since", "", "only jobs that died at or after this RFC 3339 time, or this long ago (e.g. 2h)")
	fs.StringVar(&ff.until, "until", "", "only jobs that died before this RFC 3339 time, or this long ago")
}

// check validates the flags; durations are taken back from now.
func (ff *filterFlags) check(now time.Time) (deadletter.Filter, error) {
	if ff.queue != "" {
		if err := checkQueue(ff.queue); err != nil {
			return deadletter.Filter{}, err
		}
	}
	if ff.typ != "" {
		if err := naming.Type(ff.typ); err != nil {
			return deadletter.Filter{}, usagef("invalid --type: %v", err)
		}
	}
	f := deadletter.Filter{Type: ff.typ, ErrorContains: ff.errSub}
	var err error
	if f.DiedAfter, err = parseWhen("since", ff.since, now); err != nil {
		return f, err
	}
	if f.DiedBefore, err = parseWhen("until", ff.until, now); err != nil {
		return f, err
	}
	return f, nil
}

// describe says in words what the flags select.
func (ff *filterFlags) describe() string {
	var parts []string
	if ff.typ != "" {
		parts = append(parts, "of type "+ff.typ)
	}
	if ff.errSub != "" {
		parts = append(parts, fmt.Sprintf("whose error contains %q", ff.errSub))
	}
	if ff.since != "" {
		parts = append(parts, "dead since "+ff.since)
	}
	if ff.until != "" {
		parts = append(parts, "dead until "+ff.until)
	}
	where := "across all queues"
	if ff.queue != "" {
		where = "in queue " + ff.queue
	}
	return strings.Join(append(parts, where), ", ")
}

func (ff *filterFlags) any() bool {
	return ff.typ != "" || ff.errSub != "" || ff.since != "" || ff.until != ""
}

// localNow is the clock for --since and --until: --now, else this machine's.
func (a *app) localNow() time.Time {
	if a.clock != nil {
		return a.clock()
	}
	return time.Now()
}

// deadJSON is a dead record in JSON output.
type deadJSON struct {
	ID         string            `json:"id"`
	Queue      string            `json:"queue"`
	Type       string            `json:"type"`
	DiedAt     *string           `json:"died_at"`
	Attempts   int               `json:"attempts"`
	Error      string            `json:"error"`
	Payload    any               `json:"payload,omitempty"`
	MaxRetries *int              `json:"max_retries,omitempty"`
	CreatedAt  *string           `json:"created_at,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body_base64,omitempty"` // when the envelope does not decode
}

func toDeadJSON(r *job.DeadRecord) deadJSON {
	out := deadJSON{ID: r.ID, Queue: r.Queue, Type: r.Type, DiedAt: jsonTime(r.DiedAt), Attempts: r.Attempts, Error: r.Error}
	if e := r.Envelope; e != nil {
		mr := e.MaxRetries
		out.Payload, out.MaxRetries, out.CreatedAt, out.Headers = payloadJSON(e.Payload), &mr, jsonTime(e.CreatedAt), e.Headers
	} else {
		out.Body = base64.StdEncoding.EncodeToString(r.Body)
	}
	return out
}

func (a *app) deadLsCommand() *cobra.Command {
	var (
		ff      filterFlags
		cursor  string
		limit   int
		maxScan int
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead jobs, newest first, with filters",
		Long: `List dead jobs, newest first, with filters. A page holds --limit records,
or fewer when it is the last. The store is indexed by the time jobs died, so
--since and --until are cheap; --type and --error are tested on each record,
read newest first, so a filter that matches little reads many records (the
whole store, at worst: about 7 µs a record).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := ff.check(a.localNow())
			if err != nil {
				return err
			}
			if limit <= 0 || limit > protocol.DeadPageMax {
				return usagef("invalid --limit %d: want 1..%d", limit, protocol.DeadPageMax)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			page, err := a.listDead(cmd.Context(), deadletter.New(b), ff.queue, deadletter.ListOptions{Filter: f, Cursor: cursor, Limit: limit, MaxScan: maxScan})
			if err != nil {
				if errors.Is(err, broker.ErrBadCursor) {
					return usagef("invalid --cursor %q: use the value a previous page printed", cursor)
				}
				return err
			}
			if a.json {
				out := struct {
					Records []deadJSON `json:"records"`
					Next    string     `json:"next,omitempty"`
					// Unreadable: queues left out because they could
					// not be read.
					Unreadable []unreadableJSON `json:"unreadable,omitempty"`
				}{Records: make([]deadJSON, len(page.Records)), Next: page.Next, Unreadable: unreadableList(page.Skipped)}
				for i, r := range page.Records {
					out.Records[i] = toDeadJSON(r)
				}
				return a.printJSON(out)
			}
			a.warnLeftOut(page.Skipped)
			if len(page.Records) == 0 {
				fmt.Fprintf(a.stdout, "no dead jobs %s\n", termSafe(ff.describe(), false))
				return nil
			}
			now, err := a.serverNow(cmd.Context(), b)
			if err != nil {
				return err
			}
			t := newTable(a.stdout, "DIED", "AGO", "QUEUE", "ID", "TYPE", "ATTEMPTS", "ERROR")
			for _, r := range page.Records {
				t.row(fmtTime(r.DiedAt), fmtDur(now.Sub(r.DiedAt)), r.Queue, r.ID, orDash(r.Type), strconv.Itoa(r.Attempts), firstLine(r.Error, 72))
			}
			return a.flushPage(t, page.Next)
		},
	}
	f := cmd.Flags()
	ff.add(f, "only this queue (default every queue)")
	f.IntVar(&limit, "limit", protocol.DeadPageDefault, "records per page")
	f.StringVar(&cursor, "cursor", "", "continue after a previous page")
	f.IntVar(&maxScan, "max-scan", 0, "records one deadletter List call reads before the listing follows its cursor (for tests)")
	_ = f.MarkHidden("max-scan")
	return cmd
}

// listDead fills a page of dead records: a filtered List call stops after
// its scan budget (10,000 records by default) with a partial page,
// and listDead follows its cursor until the page is full or the store has
// no more. A filter that matches little thus reads the whole store, about
// 7 µs a record.
func (a *app) listDead(ctx context.Context, in *deadletter.Inspector, queue string, opts deadletter.ListOptions) (deadletter.Page, error) {
	var page deadletter.Page
	for {
		p, err := in.List(ctx, queue, opts)
		if err != nil {
			return deadletter.Page{}, err
		}
		page.Records = append(page.Records, p.Records...)
		page.Next = p.Next
		page.Scanned += p.Scanned
		for q, err := range p.Skipped {
			if page.Skipped == nil {
				page.Skipped = map[string]error{}
			}
			page.Skipped[q] = err
		}
		if !p.Partial {
			return page, nil
		}
		opts.Cursor, opts.Limit = p.Next, opts.Limit-len(p.Records)
	}
}

func (a *app) deadShowCommand() *cobra.Command {
	has := func(ctx context.Context, b *broker.Broker, queue, id string) error {
		_, err := deadletter.New(b).Get(ctx, queue, id)
		return err
	}
	return a.showCommand("Show one dead job with its full final error", has,
		func(ctx context.Context, b *broker.Broker, queue, id string) error {
			r, err := deadletter.New(b).Get(ctx, queue, id)
			if err != nil {
				return notFound(err)
			}
			if a.json {
				return a.printJSON(toDeadJSON(r))
			}
			now, err := a.serverNow(ctx, b)
			if err != nil {
				return err
			}
			return a.showDead(r, now)
		})
}

func (a *app) showDead(r *job.DeadRecord, now time.Time) error {
	t := newDetails(a.stdout, r.ID, r.Queue)
	t.row("Type:", orDash(r.Type))
	t.row("Died:", fmtTime(r.DiedAt)+" ("+relative(r.DiedAt, now)+")")
	if e := r.Envelope; e != nil {
		t.row("Attempts:", fmt.Sprintf("%d (max retries %d)", r.Attempts, e.MaxRetries))
		t.row("Created:", fmtTime(e.CreatedAt))
		t.headers(e.Headers)
		t.row("Payload:", payloadText(e.Payload))
	} else {
		t.row("Attempts:", strconv.Itoa(r.Attempts))
		t.body(r.Body)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "Error:\n%s\n", indent(termSafe(r.Error, true)))
	return err
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
}

// bulkFlags are the flags of redrive and rm.
type bulkFlags struct {
	filterFlags
	all   bool
	yes   bool
	batch int
}

func (bf *bulkFlags) add(fs *pflag.FlagSet, verb string) {
	bf.filterFlags.add(fs, "queue of the ids (default \"default\"); with filters, only this queue (default every queue)")
	fs.BoolVar(&bf.all, "all", false, verb+" every dead job (of --queue, or of every queue)")
	fs.BoolVarP(&bf.yes, "yes", "y", false, "do not ask for confirmation")
	fs.IntVar(&bf.batch, "batch", 100, "jobs per Redis call")
}

// mode checks that ids, filters and --all are not mixed and returns the
// filter for a filter-wide run (ok false for ids).
func (bf *bulkFlags) mode(ids []string, now time.Time) (f deadletter.Filter, bulk bool, err error) {
	switch {
	case len(ids) > 0 && (bf.any() || bf.all):
		return f, false, usagef("give job ids, or filters (--type, --error, --since, --until), or --all, not both")
	case len(ids) == 0 && !bf.any() && !bf.all:
		return f, false, usagef("give job ids, filters (--type, --error, --since, --until) or --all")
	case bf.batch <= 0 || bf.batch > protocol.DeadPageMax:
		return f, false, usagef("invalid --batch %d: want 1..%d", bf.batch, protocol.DeadPageMax)
	}
	if len(ids) > 0 {
		if bf.queue == "" {
			bf.queue = naming.DefaultQueue
		}
		if err := checkQueue(bf.queue); err != nil {
			return f, false, err
		}
		return f, false, checkIDs(ids)
	}
	f, err = bf.check(now)
	return f, true, err
}

// runBulk asks for confirmation, then runs a filter-wide redrive or delete
// with progress on a terminal, and prints the counts.
func (a *app) runBulk(ctx context.Context, in *deadletter.Inspector, bf *bulkFlags, f deadletter.Filter, verb, past string,
	run func(context.Context, string, deadletter.Filter, deadletter.BulkOptions) (deadletter.BulkResult, error), delay time.Duration) error {
	n, err := in.Count(ctx, bf.queue, f)
	if err != nil {
		return err
	}
	if n == 0 {
		if a.json {
			return a.printJSON(map[string]any{past: 0, "failed": 0})
		}
		fmt.Fprintf(a.stdout, "no dead jobs %s\n", termSafe(bf.describe(), false))
		return nil
	}
	if err := a.confirm(bf.yes, fmt.Sprintf("%s %d dead job(s) %s?", verb, n, bf.describe())); err != nil {
		return err
	}
	opts := deadletter.BulkOptions{Delay: delay, Batch: bf.batch}
	if a.stderrTTY {
		opts.Progress = func(r deadletter.BulkResult) {
			fmt.Fprintf(a.stderr, "\r%s %d of %d (%d failed)", past, r.Done, n, r.Failed)
		}
	}
	res, err := run(ctx, bf.queue, f, opts)
	if a.stderrTTY {
		fmt.Fprintln(a.stderr)
	}
	if err != nil {
		return fmt.Errorf("%s %d job(s), then: %w", past, res.Done, err)
	}
	if a.json {
		out := map[string]any{past: res.Done, "failed": res.Failed}
		if res.Err != nil {
			out["first_error"] = res.Err.Error()
		}
		if err := a.printJSON(out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "%s %d dead job(s)\n", past, res.Done)
	}
	if res.Failed > 0 {
		return fmt.Errorf("%d job(s) failed, first: %w", res.Failed, res.Err)
	}
	return nil
}

// bulkAction is what dead redrive and dead rm do: to the jobs named by id,
// or to every match of the filters (or --all) after a confirmation.
type bulkAction struct {
	verb, past, done string // "Redrive", "redriven", "redrove"
	// delay reads the command's own flags after the shared ones are
	// checked; nil for none.
	delay func() (time.Duration, error)
	all   func(*deadletter.Inspector, context.Context, string, deadletter.Filter, deadletter.BulkOptions) (deadletter.BulkResult, error)
	one   func(ctx context.Context, in *deadletter.Inspector, queue string, delay time.Duration, id string) error
}

// bulkCommand gives c the flags of bulkFlags and a RunE that does act.
func (a *app) bulkCommand(c *cobra.Command, act bulkAction) *cobra.Command {
	var bf bulkFlags
	c.RunE = func(cmd *cobra.Command, args []string) error {
		f, bulk, err := bf.mode(args, a.localNow())
		if err != nil {
			return err
		}
		var delay time.Duration
		if act.delay != nil {
			if delay, err = act.delay(); err != nil {
				return err
			}
		}
		b, err := a.broker(cmd.Context())
		if err != nil {
			return err
		}
		insp := deadletter.New(b)
		if bulk {
			run := func(ctx context.Context, queue string, f deadletter.Filter, o deadletter.BulkOptions) (deadletter.BulkResult, error) {
				return act.all(insp, ctx, queue, f, o)
			}
			return a.runBulk(cmd.Context(), insp, &bf, f, act.verb, act.past, run, delay)
		}
		return a.eachID(args, act.done, func(id string) (string, error) {
			return "", notFound(act.one(cmd.Context(), insp, bf.queue, delay, id))
		})
	}
	bf.add(c.Flags(), strings.ToLower(act.verb))
	return c
}

func (a *app) deadRedriveCommand() *cobra.Command {
	var in string
	cmd := a.bulkCommand(&cobra.Command{
		Use:   "redrive [ID...]",
		Short: "Send dead jobs back to the schedule with their attempts reset",
		Long: `Send dead jobs back to the schedule, with their attempts reset: the jobs
named by id (in --queue), those matching filters, or --all. Filter-wide and
--all runs ask for confirmation unless --yes is given, and move the jobs in
batches so that Redis stays responsive.

An id that is not dead (any more) fails with "not found"; an id whose job is
pending again fails with "already pending" and keeps its dead record.`,
	}, bulkAction{
		verb: "Redrive", past: "redriven", done: "redrove",
		delay: func() (time.Duration, error) {
			if in == "" {
				return 0, nil
			}
			return parseIn(in)
		},
		all: (*deadletter.Inspector).RedriveAll,
		one: func(ctx context.Context, in *deadletter.Inspector, queue string, delay time.Duration, id string) error {
			return in.Redrive(ctx, queue, delay, id)
		},
	})
	cmd.Flags().StringVar(&in, "in", "", "ready this long after the redrive (default at once)")
	return cmd
}

func (a *app) deadRmCommand() *cobra.Command {
	return a.bulkCommand(&cobra.Command{
		Use:   "rm [ID...]",
		Short: "Delete dead jobs for good",
		Long: `Delete dead jobs for good: the jobs named by id (in --queue), those matching
filters, or --all. Filter-wide and --all runs ask for confirmation unless
--yes is given.`,
	}, bulkAction{
		verb: "Delete", past: "deleted", done: "deleted",
		all: (*deadletter.Inspector).DeleteAll,
		one: func(ctx context.Context, in *deadletter.Inspector, queue string, _ time.Duration, id string) error {
			return in.Delete(ctx, queue, id)
		},
	})
}

func (a *app) deadPurgeCommand() *cobra.Command {
	var (
		queue string
		yes   bool
	)
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete every dead job of a queue, or of every queue",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if queue != "" {
				if err := checkQueue(queue); err != nil {
					return err
				}
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			insp := deadletter.New(b)
			where := "across all queues"
			if queue != "" {
				where = "in queue " + queue
			}
			n, err := insp.Count(cmd.Context(), queue, deadletter.Filter{})
			if err != nil {
				return err
			}
			if n > 0 {
				if err := a.confirm(yes, fmt.Sprintf("Delete all %d dead job(s) %s?", n, where)); err != nil {
					return err
				}
				res, err := insp.DeleteAll(cmd.Context(), queue, deadletter.Filter{}, deadletter.BulkOptions{})
				if err != nil {
					return err
				}
				n = int64(res.Done)
			}
			if a.json {
				return a.printJSON(map[string]int64{"purged": n})
			}
			_, err = fmt.Fprintf(a.stdout, "purged %d dead job(s) %s\n", n, where)
			return err
		},
	}
	queueFlag(cmd.Flags(), &queue, "", "only this queue (default every queue)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func (a *app) deadTrimCommand() *cobra.Command {
	var (
		queue  string
		keep   int
		maxAge time.Duration
	)
	cmd := &cobra.Command{
		Use:   "trim",
		Short: "Apply retention now: keep the newest --cap records per queue, none older than --max-age",
		Long: `Apply retention now: keep the newest --cap records per queue and drop those
older than --max-age. Workers apply their broker's retention each time a job
dies; trim also cleans queues where nothing died lately. Give the same
values as the workers' broker.Options (DeadCap, DeadMaxAge).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if queue != "" {
				if err := checkQueue(queue); err != nil {
					return err
				}
			}
			if keep == 0 || maxAge == 0 {
				return usagef("--cap and --max-age must not be 0 (negative means no limit)")
			}
			b, err := a.brokerWith(cmd.Context(), broker.Options{DeadCap: keep, DeadMaxAge: maxAge})
			if err != nil {
				return err
			}
			n, err := deadletter.New(b).Trim(cmd.Context(), queue)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]int64{"dropped": n})
			}
			_, err = fmt.Fprintf(a.stdout, "dropped %d dead job(s)\n", n)
			return err
		},
	}
	f := cmd.Flags()
	queueFlag(f, &queue, "", "only this queue (default every queue)")
	f.IntVar(&keep, "cap", admin.DefaultDeadCap, "dead records to keep per queue; negative for no cap")
	f.DurationVar(&maxAge, "max-age", admin.DefaultDeadMaxAge, "drop records older than this; negative for no limit")
	return cmd
}
