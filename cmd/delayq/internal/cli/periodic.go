package cli

import (
	"context"
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
nothing runs it and the next scheduler's heartbeat removes it. A stored record
that does not decode is shown as "unreadable" with its schedule's name and why
(--json: "problem"), beside the other schedules.`,
		Args: noArgs,
		RunE: a.onBroker(a.listPeriodic),
	}
	return group("periodic", "Inspect periodic schedules", ls)
}

type periodicJSON struct {
	Name    string               `json:"name"`
	Spec    string               `json:"spec"`
	Zone    string               `json:"zone"`
	Type    string               `json:"type"`
	Queue   string               `json:"queue"`
	Missed  string               `json:"missed"`
	Within  int64                `json:"missed_within_ms,omitempty"`
	Next    *string              `json:"next_run,omitempty"`
	Last    *string              `json:"last_run,omitempty"`
	LastID  string               `json:"last_job_id,omitempty"`
	Outcome *periodicOutcomeJSON `json:"last_outcome,omitempty"`
	Seen    *string              `json:"seen"`
	Stale   bool                 `json:"stale"`
	Problem string               `json:"problem,omitempty"`
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
				Name: s.Name, Spec: s.Spec, Zone: s.Zone, Type: s.Type, Queue: s.Queue, Missed: s.Missed.String(),
				Next: jsonTime(s.Next), Last: jsonTime(s.Last), LastID: s.LastID, Seen: jsonTime(s.Seen), Stale: s.Stale,
				Problem: s.Problem,
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
		missed := s.Missed.String()
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
