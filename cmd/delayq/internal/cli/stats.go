package cli

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/relaystatus"
	"github.com/delayq/delayq/job"
)

func (a *app) statsCommand() *cobra.Command {
	var (
		watch    bool
		interval time.Duration
		queues   []string
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show every queue's counts: scheduled, due, processing, dead; and the outbox relays",
		Long: `Show every queue's counts: jobs scheduled, of those due now, processing and
dead, the dead records trimmed (dropped by the dead-letter cap or by age, and
of those, the ones a worker's OnDeadTrimmed hook could not be handed), how
late the oldest due job is, and when the next job becomes ready.
Counts are read in O(log N) per queue, never by scanning. With --json each
queue also says whether it is paused (paused, parked_by_type) and whether
fair turns between keys are on (fair_keys; delayq keys fair).

Then the outbox relays that recorded their status: the lag of the oldest row
waiting in their table, rows pending and failed, rows relayed since the relay
started, when it last recorded, and whether it is stale (killed, or cut off
from Redis) or failing (its last error).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, q := range queues {
				if err := checkQueue(q); err != nil {
					return err
				}
			}
			if interval <= 0 {
				return usagef("invalid --interval %s: must be positive", interval)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if !watch {
				return a.showStats(cmd.Context(), b, queues, false)
			}
			return a.watchStats(cmd.Context(), b, queues, interval)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&watch, "watch", "w", false, "refresh until interrupted")
	f.DurationVar(&interval, "interval", 2*time.Second, "refresh interval with --watch")
	f.StringSliceVarP(&queues, "queue", "q", nil, "only these queues (repeatable; default every queue)")
	return cmd
}

func (a *app) watchStats(ctx context.Context, b *broker.Broker, queues []string, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for frame := 0; ; frame++ {
		if !a.json {
			switch {
			case a.stdoutTTY:
				fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // home and clear
			case frame > 0:
				fmt.Fprintln(a.stdout)
			}
		}
		if err := a.showStats(ctx, b, queues, true); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: a normal end of --watch
		case <-t.C:
		}
	}
}

type statsJSON struct {
	Now    *string          `json:"now"`
	Queues []queueStatsJSON `json:"queues"`
	Outbox []relayJSON      `json:"outbox_relays"`
	// Unreadable: queues left out because they could not be read.
	Unreadable []unreadableJSON `json:"unreadable,omitempty"`
}

// relayJSON is one outbox relay's last recorded status.
type relayJSON struct {
	Name      string  `json:"name"`
	Table     string  `json:"table"`
	LagMS     int64   `json:"lag_ms"`
	Pending   int64   `json:"pending"`
	Failed    int64   `json:"failed"`
	Relayed   int64   `json:"relayed"`
	Seen      *string `json:"seen"`
	Stale     bool    `json:"stale"`
	LastError string  `json:"last_error,omitempty"`
}

type queueStatsJSON struct {
	Queue      string  `json:"queue"`
	Scheduled  int64   `json:"scheduled"`
	Due        int64   `json:"due"`
	Processing int64   `json:"processing"`
	Dead       int64   `json:"dead"`
	OldestDue  *string `json:"oldest_due,omitempty"`
	LatenessMS int64   `json:"lateness_ms"`
	NextReady  *string `json:"next_ready,omitempty"`
	Paused     bool    `json:"paused"`
	// FairKeys: fair turns between keys are on (keys fair).
	FairKeys bool  `json:"fair_keys"`
	Parked   int64 `json:"parked"`
	// ParkedByType: Parked by type, the types holding parked jobs only.
	ParkedByType map[string]int64 `json:"parked_by_type"`
	deadTrimmedJSON
	// Served: how many live processes (workers) serve the queue, by the
	// process registry; HeldUnserved: jobs are processing and none does.
	Served       int  `json:"served_by"`
	HeldUnserved bool `json:"held_unserved"`
}

// readStats reads the stats of queues (every queue when none is given).
// Queues that cannot be read are left out and named in a
// *broker.QueueErrors, unless none of the queues named could be read: then
// the error is why the first could not.
func (a *app) readStats(ctx context.Context, b *broker.Broker, queues []string) ([]job.QueueStats, error) {
	out, err := b.Stats(ctx, queues...)
	var bad *broker.QueueErrors
	if len(queues) > 0 && len(out) == 0 && errors.As(err, &bad) {
		return nil, bad.Errs[queues[0]]
	}
	return out, err
}

func (a *app) showStats(ctx context.Context, b *broker.Broker, queues []string, watching bool) error {
	all, err := a.readStats(ctx, b, queues)
	bad, err := leftOut(err)
	if err != nil {
		return err
	}
	relays, err := relaystatus.Read(ctx, b.Client(), b.Namespace())
	if err != nil {
		return err
	}
	procs, err := fleet.List(ctx, b.Client(), b.Namespace())
	if err != nil {
		return err
	}
	var now time.Time
	if len(all) > 0 {
		now = all[0].Now
	}
	if a.json {
		out := statsJSON{Now: jsonTime(now), Queues: make([]queueStatsJSON, len(all)), Outbox: make([]relayJSON, len(relays)), Unreadable: unreadableList(bad)}
		for i, s := range all {
			out.Queues[i] = queueStatsJSON{
				Queue: s.Queue, Scheduled: s.Scheduled, Due: s.Due, Processing: s.Processing, Dead: s.Dead,
				OldestDue: jsonTime(s.OldestDue), LatenessMS: waited(s).Milliseconds(), NextReady: jsonTime(s.NextReady),
				Paused: s.Paused, FairKeys: s.FairKeys, Parked: s.Parked, ParkedByType: s.ParkedByType, deadTrimmedJSON: trimmedOf(s),
				Served: len(procs.Serving(s.Queue)), HeldUnserved: heldUnserved(s, procs),
			}
			if out.Queues[i].ParkedByType == nil {
				out.Queues[i].ParkedByType = map[string]int64{}
			}
		}
		for i, r := range relays {
			out.Outbox[i] = relayJSON{Name: r.Name, Table: r.Table, LagMS: r.Lag.Milliseconds(), Pending: r.Pending,
				Failed: r.Failed, Relayed: r.Relayed, Seen: jsonTime(r.Seen), Stale: r.Stale, LastError: r.Error}
		}
		return a.printJSON(out)
	}
	a.warnLeftOut(bad)
	if len(all) == 0 {
		if len(bad) == 0 {
			fmt.Fprintln(a.stdout, "no queues yet: nothing was ever enqueued in namespace", orDash(b.Namespace()))
		}
		return a.showRelays(relays, now)
	}
	if watching {
		fmt.Fprintf(a.stdout, "delayq stats at %s (namespace %s)\n\n", fmtTime(now), b.Namespace())
	}
	t := newTable(a.stdout, "QUEUE", "SCHEDULED", "DUE", "PROCESSING", "DEAD", "TRIMMED", "OLDEST DUE", "NEXT READY")
	var tot job.QueueStats
	var unserved []job.QueueStats
	for _, s := range all {
		late := "-"
		if !s.OldestDue.IsZero() {
			late = fmtDur(s.Now.Sub(s.OldestDue)) + " late"
		}
		name := s.Queue
		switch {
		case s.Paused:
			name += " (paused)"
		case len(s.PausedTypes) > 0:
			name += " (types paused)"
		}
		if heldUnserved(s, procs) {
			name += " (no live worker)"
			unserved = append(unserved, s)
		}
		t.row(name, num(s.Scheduled), num(s.Due), num(s.Processing), num(s.Dead), trimmedText(s), late, relative(s.NextReady, s.Now))
		tot.Scheduled += s.Scheduled
		tot.Due += s.Due
		tot.Processing += s.Processing
		tot.Dead += s.Dead
		tot.DeadTrimmedCap += s.DeadTrimmedCap
		tot.DeadTrimmedAge += s.DeadTrimmedAge
		tot.DeadTrimmedUnarchived += s.DeadTrimmedUnarchived
	}
	if len(all) > 1 {
		t.row("(total)", num(tot.Scheduled), num(tot.Due), num(tot.Processing), num(tot.Dead), trimmedText(tot))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, s := range unserved {
		fmt.Fprintln(a.stdout, termSafe(unservedText(s), false))
	}
	return a.showRelays(relays, now)
}

// deadTrimmedJSON counts the dead records of a queue that its dead-letter
// store dropped, since the queue began: by its cap (broker.Options.DeadCap)
// and by age (DeadMaxAge); of those, the ones a worker's hook
// (worker.Options.OnDeadTrimmed) could not be handed for want of room.
type deadTrimmedJSON struct {
	DeadTrimmedCap        int64 `json:"dead_trimmed_cap"`
	DeadTrimmedAge        int64 `json:"dead_trimmed_age"`
	DeadTrimmedUnarchived int64 `json:"dead_trimmed_unarchived"`
}

func trimmedOf(s job.QueueStats) deadTrimmedJSON {
	return deadTrimmedJSON{DeadTrimmedCap: s.DeadTrimmedCap, DeadTrimmedAge: s.DeadTrimmedAge, DeadTrimmedUnarchived: s.DeadTrimmedUnarchived}
}

// trimmedText is the TRIMMED column: the dead records dropped by the cap
// and by age, "-" when none.
func trimmedText(s job.QueueStats) string {
	if s.DeadTrimmedCap == 0 && s.DeadTrimmedAge == 0 {
		return "-"
	}
	var parts []string
	if s.DeadTrimmedCap > 0 {
		parts = append(parts, num(s.DeadTrimmedCap)+" cap")
	}
	if s.DeadTrimmedAge > 0 {
		parts = append(parts, num(s.DeadTrimmedAge)+" age")
	}
	if s.DeadTrimmedUnarchived > 0 {
		parts = append(parts, num(s.DeadTrimmedUnarchived)+" unarchived")
	}
	return strings.Join(parts, ", ")
}

// heldUnserved reports whether jobs of s are processing while no live
// process of the registry serves its queue: the worker that holds them
// died or cannot reach Redis.
func heldUnserved(s job.QueueStats, procs fleet.Snapshot) bool {
	return s.Processing > 0 && len(procs.Serving(s.Queue)) == 0
}

// unservedText is the warning of a queue whose processing jobs no live
// process serves.
func unservedText(s job.QueueStats) string {
	return fmt.Sprintf("warning: queue %s: %d jobs processing and no live worker serves it (delayq workers ls): "+
		"they go back to the schedule only when their lease has run out and a worker of the queue runs", s.Queue, s.Processing)
}

// showRelays prints the outbox relays' table after the queues', when a
// relay recorded its status.
func (a *app) showRelays(relays []relaystatus.Status, now time.Time) error {
	if len(relays) == 0 {
		return nil
	}
	if now.IsZero() {
		now = relays[0].Seen
	}
	fmt.Fprintln(a.stdout)
	t := newTable(a.stdout, "OUTBOX RELAY", "TABLE", "LAG", "PENDING", "FAILED", "RELAYED", "SEEN", "STATE")
	for _, r := range relays {
		state := "live"
		switch {
		case r.Stale:
			state = "stale (killed, or cannot reach Redis)"
		case r.Error != "":
			state = "failing: " + firstLine(r.Error, 120)
		}
		t.row(r.Name, orDash(r.Table), fmtDur(r.Lag), num(r.Pending), num(r.Failed), num(r.Relayed), relative(r.Seen, now), state)
	}
	return t.flush()
}

func num(n int64) string { return strconv.FormatInt(n, 10) }

// Version is the tool's version, set at build time with
// -ldflags "-X github.com/delayq/delayq/cmd/delayq/internal/cli.Version=v1.2.3".
// When empty, the module version from the build info is used.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of delayq",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.json {
				return a.printJSON(map[string]string{"version": version(), "go": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH})
			}
			_, err := fmt.Fprintf(a.stdout, "delayq %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// waited is how long the oldest due job of s has waited, or 0.
func waited(s job.QueueStats) time.Duration {
	if s.OldestDue.IsZero() {
		return 0
	}
	return max(s.Now.Sub(s.OldestDue), 0)
}
