package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/periodic"
)

func (a *app) periodicCommand() *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the periodic schedules: expression, zone, next run, last run, last outcome, stale",
		Long: `List the periodic schedules that schedulers synced to Redis: the cron
expression and its time zone, the job type and queue, the missed-tick policy,
the next run (from the expression), the last tick enqueued, the outcome of the
latest finished attempt (recorded by periodic.Outcomes in the worker), and
whether the schedule is stale: no running scheduler declares it any more, so
nothing runs it and the next scheduler's heartbeat removes it, or paused
(delayq periodic pause: its ticks are skipped, last outcome "paused"). A stored record
that does not decode is shown as "unreadable" with its schedule's name and why
(--json: "problem"), beside the other schedules.`,
		Args: noArgs,
		RunE: a.onBroker(a.listPeriodic),
	}
	return group("periodic", "List, pause, resume and run periodic schedules", ls,
		a.periodicPauseCommand(true), a.periodicPauseCommand(false), a.periodicRunCommand())
}

// periodicPauseCommand is "periodic pause" (pause) or "periodic resume".
func (a *app) periodicPauseCommand(pause bool) *cobra.Command {
	use, short, long := "resume NAME", "Resume a paused periodic schedule",
		`Resume a paused schedule, for every scheduler process. The ticks due while
it was paused never run; its ticks after now run as usual (when no scheduler
is there for them, by the schedule's missed-tick policy counted from now).
Resuming a schedule that is not paused changes nothing. A name that is no
stored schedule (see delayq periodic ls) is refused, and nothing changes.`
	if pause {
		use, short, long = "pause NAME", "Pause a periodic schedule in every scheduler process",
			`Pause a schedule, for every scheduler process: from their next step (within
a second, periodic.Options.Poll), none enqueues its ticks, and each tick skipped is its
last outcome, "paused" (delayq periodic ls). The pause is stored in Redis and
lasts, across scheduler restarts, until delayq periodic resume. Jobs of ticks
enqueued before go on; "delayq periodic run" still runs it. Pausing a paused
schedule changes nothing. A name that is no stored schedule (see delayq
periodic ls) is refused, and nothing changes.`
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  exactArgs(1, "one schedule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			name := args[0]
			set, verb := periodic.Resume, "resumed"
			if pause {
				set, verb = periodic.Pause, "paused"
			}
			if err := set(cmd.Context(), b, name); err != nil {
				return scheduleError(err, b)
			}
			if a.json {
				return a.printJSON(map[string]any{"schedule": name, "paused": pause})
			}
			_, err = fmt.Fprintln(a.stdout, termSafe(verb+" schedule "+name, false))
			return err
		},
	}
}

// scheduleError makes the refusal of a name that is no schedule bad input
// (exit status 2), naming where to look.
func scheduleError(err error, b *broker.Broker) error {
	if errors.Is(err, periodic.ErrUnknownSchedule) {
		return usagef("%v in namespace %s: nothing changed (see delayq periodic ls)", err, orDash(b.Namespace()))
	}
	return err
}

// periodicRunCommand is "periodic run".
func (a *app) periodicRunCommand() *cobra.Command {
	var (
		request string
		wait    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run NAME",
		Short: "Run a periodic schedule's job once, now, outside its timing",
		Long: `Request one run of a schedule now. The scheduler processes that declare the
schedule pick the request up within a second (periodic.Options.Poll) and enqueue its job
as they build a tick's (same type, arguments, options and queue), with the id
NAME@run:REQUEST, ready at once; the schedule's next tick is not disturbed, and
a paused schedule runs too. The request id (--request, else a random one) makes
the request safe to send again: the same NAME and REQUEST within 24 hours is
the same request, and runs at most once. The command waits up to --wait for the
job to be enqueued (0: return once the request is recorded) and prints its id
and queue; when no scheduler enqueued it by then it fails (exit 1), and the
request stays pending: send the same --request again to wait for it. A name
that is no stored schedule is refused (exit 2), and so is a stale one (exit 1):
no running scheduler would run it.`,
		Args: exactArgs(1, "one schedule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait < 0 {
				return usagef("invalid --wait %s: must not be negative", wait)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			ctx, name := cmd.Context(), args[0]
			r, err := periodic.RunNow(ctx, b, name, request)
			if err != nil {
				return scheduleError(err, b)
			}
			for deadline := time.Now().Add(wait); r.State == periodic.RunPending && time.Now().Before(deadline); {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				if r, err = periodic.LookupRun(ctx, b, name, r.Request); err != nil {
					return err
				}
			}
			if a.json {
				if err := a.printJSON(map[string]any{"schedule": name, "request": r.Request, "job_id": r.ID, "state": r.State,
					"queue": r.Queue, "error": r.Error, "requested": jsonTime(r.Requested)}); err != nil {
					return err
				}
			}
			switch {
			case r.State == periodic.RunRefused:
				return fmt.Errorf("the job of run-now request %s cannot be enqueued: %s", r.ID, r.Error)
			case r.State == periodic.RunPending && wait > 0:
				return fmt.Errorf("run-now request %s is recorded, but no scheduler enqueued its job within %s: is a scheduler that declares %s running? Send it again with --request %s to wait for it (it runs once)", r.ID, wait, name, r.Request)
			case a.json:
				return nil
			case r.State == periodic.RunPending:
				_, err = fmt.Fprintln(a.stdout, termSafe("requested "+r.ID+": a scheduler enqueues it at its next step", false))
			default:
				_, err = fmt.Fprintln(a.stdout, termSafe("enqueued "+r.ID+" in queue "+r.Queue, false))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&request, "request", "", "request id (letters, digits, '._-'; default: a random one); the same id runs once")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for a scheduler to enqueue the job (0: do not wait)")
	return cmd
}

type periodicJSON struct {
	Name     string               `json:"name"`
	Spec     string               `json:"spec"`
	Zone     string               `json:"zone"`
	Type     string               `json:"type"`
	Queue    string               `json:"queue"`
	Missed   string               `json:"missed"`
	Within   int64                `json:"missed_within_ms,omitempty"`
	Next     *string              `json:"next_run,omitempty"`
	Last     *string              `json:"last_run,omitempty"`
	LastID   string               `json:"last_job_id,omitempty"`
	Outcome  *periodicOutcomeJSON `json:"last_outcome,omitempty"`
	Seen     *string              `json:"seen"`
	Stale    bool                 `json:"stale"`
	Paused   bool                 `json:"paused"`
	PausedAt *string              `json:"paused_at,omitempty"`
	Problem  string               `json:"problem,omitempty"`
}

type periodicOutcomeJSON struct {
	Result  string  `json:"result"`
	Tick    *string `json:"tick,omitempty"`
	At      *string `json:"at,omitempty"`
	Attempt int     `json:"attempt"`
	Error   string  `json:"error,omitempty"`
}

// now is the --now clock, or the zero time for the server's.
func (a *app) nowOrServer() time.Time {
	if a.clock != nil {
		return a.clock()
	}
	return time.Time{}
}

func (a *app) listPeriodic(ctx context.Context, b *broker.Broker) error {
	now := a.nowOrServer()
	if now.IsZero() {
		t, err := b.Client().Time(ctx).Result()
		if err != nil {
			return err
		}
		now = t
	}
	all, err := periodic.List(ctx, b, now)
	if err != nil {
		return err
	}
	if a.json {
		out := make([]periodicJSON, len(all))
		for i, s := range all {
			out[i] = periodicJSON{
				Name: s.Name, Spec: s.Spec, Zone: s.Zone, Type: s.Type, Queue: s.Queue, Missed: s.Missed,
				Next: jsonTime(s.Next), Last: jsonTime(s.Last), LastID: s.LastID, Seen: jsonTime(s.Seen), Stale: s.Stale,
				Paused: s.Paused, PausedAt: jsonTime(s.PausedAt), Problem: s.Problem,
			}
			if s.Within > 0 {
				out[i].Within = s.Within.Milliseconds()
			}
			if o := s.Outcome; o != nil {
				out[i].Outcome = &periodicOutcomeJSON{Result: o.Result, Tick: jsonTime(o.Tick), At: jsonTime(o.At), Attempt: o.Attempt, Error: o.Error}
			}
		}
		return a.printJSON(map[string]any{"now": jsonTime(now), "schedules": out})
	}
	if len(all) == 0 {
		_, err := a.stdout.Write([]byte("no periodic schedules in namespace " + orDash(b.Namespace()) + "\n"))
		return err
	}
	t := newTable(a.stdout, "NAME", "EXPRESSION", "ZONE", "TYPE", "QUEUE", "MISSED", "NEXT RUN", "LAST RUN", "LAST OUTCOME", "STATE")
	for _, s := range all {
		missed := s.Missed
		if s.Within > 0 {
			missed += " (" + fmtDur(s.Within) + ")"
		}
		state := "live"
		switch {
		case s.Spec == "" && s.Problem != "":
			// Its own record is unreadable: nothing of it to show but why.
			missed, state = "-", "unreadable: "+firstLine(s.Problem, 120)
		case s.Stale:
			state = "stale (seen " + relative(s.Seen, now) + ")"
		case s.Paused:
			state = "paused (" + relative(s.PausedAt, now) + ")"
		}
		if s.Spec != "" && s.Problem != "" {
			state += "; unreadable: " + firstLine(s.Problem, 120)
		}
		t.row(s.Name, orDash(s.Spec), orDash(s.Zone), orDash(s.Type), orDash(s.Queue), missed, whenAt(s.Next, now), whenAt(s.Last, now), outcomeText(s.Outcome, now), state)
	}
	return t.flush()
}

// whenAt prints an instant with how far it is from now.
func whenAt(at, now time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return fmtTime(at) + " (" + relative(at, now) + ")"
}

// outcomeText is a schedule's last outcome on one line.
func outcomeText(o *periodic.LastOutcome, now time.Time) string {
	if o == nil {
		return "-"
	}
	s := o.Result + " " + relative(o.At, now)
	if o.Error != "" {
		s += ": " + firstLine(o.Error, 60)
	}
	return s
}
