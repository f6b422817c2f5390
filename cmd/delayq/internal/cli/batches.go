package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
)

func (a *app) batchesCommand() *cobra.Command {
	var (
		limit  int
		cursor string
	)
	ls := &cobra.Command{
		Use:   "ls [--limit N] [--cursor C]",
		Short: "List batches, newest first: state, members pending, succeeded and dead, callbacks fired",
		Long: `List batches, newest first. STATE is open (members can still be added),
sealed (no more members; some still pending) or complete (sealed and every
member ended). TOTAL is the members added, PENDING those not ended yet,
SUCCEEDED and DEAD those that ended so (a dead member that is redriven and
succeeds moves to SUCCEEDED), GONE those that ended without success and
without a dead record (cancelled before they ran, or expired with
DropExpired): TOTAL = PENDING + SUCCEEDED + DEAD + GONE. CALLBACKS names
each callback the batch has and whether it fired: success=fired,
complete=waiting, or success=skipped when the batch completed with a dead or
gone member (the success callback then never fires).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > admin.MaxBatchesPage {
				return usagef("invalid --limit %d: want 1..%d", limit, admin.MaxBatchesPage)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			return a.listBatches(cmd.Context(), b, cursor, limit)
		},
	}
	f := ls.Flags()
	f.IntVar(&limit, "limit", 50, "batches per page (1.."+strconv.Itoa(admin.MaxBatchesPage)+")")
	f.StringVar(&cursor, "cursor", "", "continue after a previous page")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one batch: its counts, callbacks (queue/id) and whether they fired, expiry",
		Args:  exactArgs(1, "one batch id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := naming.BatchID(args[0]); err != nil {
				return usagef("invalid batch id: %v", err)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			return a.showBatch(cmd.Context(), b, args[0])
		},
	}
	return group("batches", "List and show batches of jobs and their callbacks", ls, show)
}

// batchJSON is a batch in JSON output.
type batchJSON struct {
	ID            string  `json:"id"`
	CreatedAt     *string `json:"created_at"`
	State         string  `json:"state"`
	Sealed        bool    `json:"sealed"`
	Total         int     `json:"total"`
	Pending       int     `json:"pending"`
	Succeeded     int     `json:"succeeded"`
	Dead          int     `json:"dead"`
	Gone          int     `json:"gone"`
	CompletedAt   *string `json:"completed_at"`
	OnSuccess     string  `json:"on_success,omitempty"`
	OnComplete    string  `json:"on_complete,omitempty"`
	SuccessFired  bool    `json:"success_fired"`
	CompleteFired bool    `json:"complete_fired"`
	ExpiresAt     *string `json:"expires_at,omitempty"`
}

func toBatchJSON(s *broker.BatchStatus) batchJSON {
	return batchJSON{ID: s.ID, CreatedAt: jsonTime(s.CreatedAt), State: batchState(s), Sealed: s.Sealed,
		Total: s.Total, Pending: s.Pending, Succeeded: s.Succeeded, Dead: s.Dead, Gone: s.Gone, CompletedAt: jsonTime(s.CompletedAt),
		OnSuccess: s.OnSuccess, OnComplete: s.OnComplete, SuccessFired: s.SuccessFired, CompleteFired: s.CompleteFired,
		ExpiresAt: jsonTime(s.ExpiresAt)}
}

// batchState is open, sealed or complete.
func batchState(s *broker.BatchStatus) string {
	switch {
	case s.Complete:
		return "complete"
	case s.Sealed:
		return "sealed"
	}
	return "open"
}

// callbackState says where a batch's callback is: fired, waiting, or
// skipped (the success callback of a batch that completed with a dead or
// gone member never fires).
func callbackState(s *broker.BatchStatus, success bool) string {
	fired := s.CompleteFired
	if success {
		fired = s.SuccessFired
	}
	switch {
	case fired:
		return "fired"
	case success && s.Complete && (s.Dead > 0 || s.Gone > 0):
		return "skipped"
	}
	return "waiting"
}

// callbacksText is the CALLBACKS cell: "success=fired,complete=waiting",
// "-" when the batch has none.
func callbacksText(s *broker.BatchStatus) string {
	var parts []string
	if s.OnSuccess != "" {
		parts = append(parts, "success="+callbackState(s, true))
	}
	if s.OnComplete != "" {
		parts = append(parts, "complete="+callbackState(s, false))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func (a *app) listBatches(ctx context.Context, b *broker.Broker, cursor string, limit int) error {
	page, err := b.Batches(ctx, cursor, limit)
	if errors.Is(err, broker.ErrBadCursor) {
		return usagef("invalid --cursor %q: use the value a previous page printed", cursor)
	}
	if err != nil {
		return err
	}
	all := page.Batches
	now, err := a.serverNow(ctx, b)
	if err != nil {
		return err
	}
	if a.json {
		out := struct {
			Batches []batchJSON `json:"batches"`
			Next    string      `json:"next,omitempty"`
		}{Batches: make([]batchJSON, len(all)), Next: page.Next}
		for i, s := range all {
			out.Batches[i] = toBatchJSON(s)
		}
		return a.printJSON(out)
	}
	if len(all) > 0 {
		t := newTable(a.stdout, "ID", "CREATED", "STATE", "TOTAL", "PENDING", "SUCCEEDED", "DEAD", "GONE", "CALLBACKS")
		for _, s := range all {
			t.row(s.ID, whenAt(s.CreatedAt, now), batchState(s), strconv.Itoa(s.Total), strconv.Itoa(s.Pending),
				strconv.Itoa(s.Succeeded), strconv.Itoa(s.Dead), strconv.Itoa(s.Gone), callbacksText(s))
		}
		if err := t.flush(); err != nil {
			return err
		}
	} else {
		// A page whose batches all expired may still have a next one.
		what := "no batches in namespace " + orDash(b.Namespace())
		if cursor != "" {
			what += " after the cursor"
		}
		if _, err := fmt.Fprintln(a.stdout, termSafe(what, false)); err != nil {
			return err
		}
	}
	if page.Next != "" {
		fmt.Fprintf(a.stdout, "more: --cursor %s\n", page.Next)
	}
	return nil
}

func (a *app) showBatch(ctx context.Context, b *broker.Broker, id string) error {
	s, err := b.Batch(ctx, id)
	if errors.Is(err, broker.ErrBatchNotFound) {
		return fmt.Errorf("not found: batch %q in namespace %s (never created, or its record expired)", id, orDash(b.Namespace()))
	}
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(toBatchJSON(s))
	}
	now, err := a.serverNow(ctx, b)
	if err != nil {
		return err
	}
	t := newTable(a.stdout, "ID:", s.ID)
	t.row("Created:", whenAt(s.CreatedAt, now))
	t.row("State:", batchState(s))
	t.row("Sealed:", yesNo(s.Sealed))
	t.row("Total:", strconv.Itoa(s.Total))
	t.row("Pending:", strconv.Itoa(s.Pending))
	t.row("Succeeded:", strconv.Itoa(s.Succeeded))
	t.row("Dead:", strconv.Itoa(s.Dead))
	t.row("Gone:", strconv.Itoa(s.Gone)+" (cancelled before they ran, or expired and dropped)")
	completed := "-"
	if !s.CompletedAt.IsZero() {
		completed = whenAt(s.CompletedAt, now)
	}
	t.row("Completed:", completed)
	t.row("On success:", callbackLine(s, s.OnSuccess, true))
	t.row("On complete:", callbackLine(s, s.OnComplete, false))
	expires := "- (kept until complete and its callbacks fired)"
	if !s.ExpiresAt.IsZero() {
		expires = whenAt(s.ExpiresAt, now)
	}
	t.row("Expires:", expires)
	return t.flush()
}

// callbackLine is a callback's "queue/id (fired)" in batches show.
func callbackLine(s *broker.BatchStatus, cb string, success bool) string {
	if cb == "" {
		return "-"
	}
	return cb + " (" + callbackState(s, success) + ")"
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}
