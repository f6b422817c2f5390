package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
)

func (a *app) queuesCommand() *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the queues: paused or active, paused job types, parked jobs, concurrency caps, held jobs",
		Args:  noArgs,
		RunE:  a.onBroker(a.listQueues),
	}
	return group("queues", "List, pause, resume and cap queues", ls, a.pauseCommand(true), a.pauseCommand(false), a.capCommand())
}

// capCommand is "queues cap".
func (a *app) capCommand() *cobra.Command {
	var typ string
	cmd := &cobra.Command{
		Use:   "cap QUEUE N",
		Short: "Cap how many jobs of a queue (or of one job type with --type) run at once across all workers",
		Long: `Cap how many jobs of a queue run at once across all workers, or with --type
how many jobs of one type of it. A job counts from its claim until its lease
ends; a crashed worker's jobs stop counting when their lease runs out. A
queue at its cap claims nothing; a due job of a type at its cap is held aside
(no attempt spent) until a job of its type ends. N = 0 clears the cap. A
sharded queue's cap is split among its shards, so N must be at least the
number of shards.`,
		Args: exactArgs(2, "a queue name and a cap"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := checkQueueType(q, typ); err != nil {
				return err
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 {
				return usagef("invalid cap %q: want a whole number, 0 to clear", args[1])
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := b.SetConcurrency(cmd.Context(), q, typ, n); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"queue": q, "type": typ, "cap": n})
			}
			what := "queue " + q
			if typ != "" {
				what = "job type " + typ + " in queue " + q
			}
			msg := fmt.Sprintf("capped %s at %d running", what, n)
			if n == 0 {
				msg = "cleared the concurrency cap of " + what
			}
			_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
			return err
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "only this job type of the queue")
	return cmd
}

// checkQueueType checks a queue argument and a --type flag ("" for none):
// a usage error naming the bad one.
func checkQueueType(q, typ string) error {
	if err := job.ValidateQueue(q); err != nil {
		return usagef("invalid queue: %v", err)
	}
	if typ != "" {
		if err := job.ValidateType(typ); err != nil {
			return usagef("invalid --type: %v", err)
		}
	}
	return nil
}

// capsText renders a queue's concurrency caps: "5" for the queue's,
// "report.build=2" for a type's, comma-separated; "-" for none.
// heldText is the HELD column: the jobs held by caps, then those held by
// each type's rate limit ("12 rate:sms.send=30").
func heldText(held int64, byRate map[string]int64) string {
	out := num(held)
	for _, t := range slices.Sorted(maps.Keys(byRate)) {
		out += " rate:" + t + "=" + num(byRate[t])
	}
	return out
}

func capsText(caps map[string]int) string {
	if len(caps) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(caps))
	for k := range caps {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		if k == "" {
			parts[i] = strconv.Itoa(caps[k])
		} else {
			parts[i] = k + "=" + strconv.Itoa(caps[k])
		}
	}
	return strings.Join(parts, ",")
}

// pauseCommand is "queues pause" (pause) or "queues resume".
func (a *app) pauseCommand(pause bool) *cobra.Command {
	var typ string
	use, short, long := "resume QUEUE", "Resume a paused queue, or a paused job type with --type",
		`Resume a queue: its workers are woken and claim its due jobs again. With
--type, resume one job type of the queue: its parked jobs go back to the
schedule (due at once), and the count of them is printed. Resuming what is
not paused changes nothing.`
	if pause {
		use, short, long = "pause QUEUE", "Pause a queue, or one job type of it with --type",
			`Pause a queue: from now on no worker claims its jobs (checked inside the
claim script) until it is resumed. Jobs go on being enqueued, retried and
cancelled; running jobs run to their end. With --type, pause only the jobs of
that type: a claim sets its due jobs aside (parked) and claims the others.
Pausing what is paused changes nothing.`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := checkQueueType(q, typ); err != nil {
				return err
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			return a.setPause(cmd.Context(), b, q, typ, pause)
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "only this job type of the queue")
	return cmd
}

func (a *app) setPause(ctx context.Context, b *broker.Broker, q, typ string, pause bool) error {
	var (
		back int64
		err  error
	)
	switch {
	case pause && typ == "":
		err = b.Pause(ctx, q)
	case pause:
		err = b.PauseType(ctx, q, typ)
	case typ == "":
		err = b.Resume(ctx, q)
	default:
		back, err = b.ResumeType(ctx, q, typ)
	}
	if err != nil {
		return err
	}
	verb := "resumed"
	if pause {
		verb = "paused"
	}
	if a.json {
		out := map[string]any{"queue": q, "paused": pause}
		if typ != "" {
			out["type"] = typ
		}
		if !pause && typ != "" {
			out["parked_jobs_back"] = back
		}
		return a.printJSON(out)
	}
	what := "queue " + q
	if typ != "" {
		what = "job type " + typ + " in queue " + q
	}
	msg := verb + " " + what
	if !pause && typ != "" {
		msg += fmt.Sprintf(": %d parked jobs back on the schedule", back)
	}
	_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
	return err
}

type queueJSON struct {
	Queue       string   `json:"queue"`
	Paused      bool     `json:"paused"`
	PausedTypes []string `json:"paused_types"`
	Parked      int64    `json:"parked"`
	// Caps: the concurrency caps, "" for the queue's, else by type.
	Caps map[string]int `json:"caps"`
	Held int64          `json:"held"`
	// HeldByRate: due jobs held by the rate limit of their type, by type
	// (counted in Scheduled and Due too).
	HeldByRate map[string]int64 `json:"held_by_rate"`
	Scheduled  int64            `json:"scheduled"`
	Due        int64            `json:"due"`
	Processing int64            `json:"processing"`
}

func (a *app) listQueues(ctx context.Context, b *broker.Broker) error {
	all, err := b.AllStats(ctx)
	bad, err := leftOut(err)
	if err != nil {
		return err
	}
	if a.json {
		out := make([]queueJSON, len(all))
		for i, s := range all {
			out[i] = queueJSON{Queue: s.Queue, Paused: s.Paused, PausedTypes: s.PausedTypes, Parked: s.Parked,
				Caps: s.Caps, Held: s.Held, HeldByRate: s.HeldByRate, Scheduled: s.Scheduled, Due: s.Due, Processing: s.Processing}
			if out[i].PausedTypes == nil {
				out[i].PausedTypes = []string{}
			}
			if out[i].Caps == nil {
				out[i].Caps = map[string]int{}
			}
			if out[i].HeldByRate == nil {
				out[i].HeldByRate = map[string]int64{}
			}
		}
		res := map[string]any{"queues": out}
		if len(bad) > 0 {
			res["unreadable"] = unreadableList(bad)
		}
		return a.printJSON(res)
	}
	a.warnLeftOut(bad)
	if len(all) == 0 {
		if len(bad) == 0 {
			fmt.Fprintln(a.stdout, "no queues yet: nothing was ever enqueued in namespace", orDash(b.Namespace()))
		}
		return nil
	}
	t := newTable(a.stdout, "QUEUE", "STATE", "PAUSED TYPES", "PARKED", "CAPS", "HELD", "SCHEDULED", "DUE", "PROCESSING")
	for _, s := range all {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		types := "-"
		if len(s.PausedTypes) > 0 {
			types = strings.Join(s.PausedTypes, ",")
		}
		t.row(s.Queue, state, types, num(s.Parked), capsText(s.Caps), heldText(s.Held, s.HeldByRate), num(s.Scheduled), num(s.Due), num(s.Processing))
	}
	return t.flush()
}
