package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

func (a *app) queuesCommand() *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the queues: paused or active, fair turns between keys, paused job types, parked jobs, concurrency caps, held jobs",
		Args:  noArgs,
		RunE:  a.onBroker(a.listQueues),
	}
	return group("queues", "List, pause, resume, cap, limit and forget queues, and list a queue's shards", ls, a.pauseCommand(true), a.pauseCommand(false), a.capCommand(), a.limitCommand(), a.forgetCommand(), a.shardsCommand())
}

// shardsCommand is "queues shards".
func (a *app) shardsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "shards QUEUE",
		Short: "List the physical queues (shards) of a queue and the Redis Cluster hash slot of each",
		Long: `List the physical queues of a queue, shard k on line k: one (the queue
itself) unless it was declared with more shards. A shard's keys are
ns:{NAME}:scheduled and so on, all in the hash slot SLOT; after resharding a
cluster, check with CLUSTER SHARDS that the shards lie on different masters.`,
		Args: exactArgs(1, "a queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := naming.Queue(args[0]); err != nil {
				return usagef("%v", err)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			shards, err := protocol.Admin(b).Shards(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				type shardJSON struct {
					Name string `json:"name"`
					Slot int    `json:"slot"`
				}
				out := make([]shardJSON, len(shards))
				for i, s := range shards {
					out[i] = shardJSON{Name: s.Name, Slot: s.Slot}
				}
				return a.printJSON(out)
			}
			t := newTable(a.stdout, "SHARD", "NAME", "SLOT")
			for i, s := range shards {
				t.row(strconv.Itoa(i), s.Name, strconv.Itoa(s.Slot))
			}
			return t.flush()
		},
	}
}

// createFlag is --create of the commands that change a queue's controls.
const createUsage = "act on a queue that was never used (without it a name nothing was enqueued to is refused, as a likely typo)"

// knownQueue refuses a queue that was never used unless create is set.
func knownQueue(ctx context.Context, b *broker.Broker, q string, create bool) error {
	if create {
		return nil
	}
	if err := protocol.Admin(b).MustKnow(ctx, q); err != nil {
		if errors.Is(err, admin.ErrUnknownQueue) {
			return fmt.Errorf("queue %q was never used in namespace %s: nothing changed (a typo? see delayq queues ls; --create acts on it anyway)", q, b.Namespace())
		}
		return err
	}
	return nil
}

// limitCommand is "queues limit".
func (a *app) limitCommand() *cobra.Command {
	var (
		typ    string
		create bool
		rf     rateFlags
	)
	cmd := &cobra.Command{
		Use:   "limit QUEUE [COUNT/PERIOD] [--type T] [--burst N | --strict [--slack D]] | --clear",
		Short: "Limit how many jobs of a queue (or of one job type with --type) start per period across all workers",
		Long: `Limit how many jobs of a queue start per period across all workers, or with
--type how many jobs of one type of it: COUNT/PERIOD, e.g. 10/1s, 600/1m,
5/250ms. --burst N lets N jobs start at once after a quiet spell (default 1).
--strict makes it a sliding window instead: never more than COUNT claims in
any PERIOD (+ --slack, how late a handler may start after its claim), with up
to COUNT at once. The limit is enforced in the claim script: a job over it is
held, not claimed, and spends no attempt. --clear removes the limit. A sharded
queue's rate is split evenly among its shards.`,
		Args: rf.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := checkQueueType(q, typ); err != nil {
				return err
			}
			r, err := rf.limit(cmd, args)
			if err != nil {
				return err
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := knownQueue(cmd.Context(), b, q, create); err != nil {
				return err
			}
			if err := b.SetRateLimit(cmd.Context(), q, typ, r); err != nil {
				return err
			}
			if a.json {
				out := rf.json(r)
				out["queue"], out["type"] = q, typ
				return a.printJSON(out)
			}
			what := "queue " + q
			if typ != "" {
				what = "job type " + typ + " in queue " + q
			}
			msg := fmt.Sprintf("limited %s to %s", what, rateText(r))
			if rf.clear {
				msg = "cleared the rate limit of " + what
			}
			_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
			return err
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "only this job type of the queue")
	rf.add(cmd)
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

// rateFlags are the flags of the commands that set a rate limit (queues
// limit, keys limit): a limit is COUNT/PERIOD after the queue, with
// --burst, or --strict with --slack; --clear takes no limit.
type rateFlags struct {
	burst  int
	strict bool
	slack  time.Duration
	clear  bool
}

// add declares the flags on cmd.
func (f *rateFlags) add(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.burst, "burst", 0, "jobs that may start at once after a quiet spell (default 1)")
	cmd.Flags().BoolVar(&f.strict, "strict", false, "a sliding window: never more than COUNT claims in any PERIOD")
	cmd.Flags().DurationVar(&f.slack, "slack", 0, "with --strict, widen the window by how late a handler may start after its claim")
	cmd.Flags().BoolVar(&f.clear, "clear", false, "remove the limit")
}

// args checks the positional arguments: a queue and COUNT/PERIOD, or a
// queue alone with --clear.
func (f *rateFlags) args(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usagef("expected a queue name and COUNT/PERIOD, or a queue name and --clear")
	case f.clear && len(args) != 1:
		return usagef("--clear takes only the queue name, got %d arguments", len(args))
	case !f.clear && len(args) != 2:
		return usagef("expected a queue name and COUNT/PERIOD (e.g. 10/1s), or --clear")
	}
	return nil
}

// limit is the limit that args (checked by args) and the flags give, the
// zero limit with --clear, or a usage error naming what is wrong.
func (f *rateFlags) limit(cmd *cobra.Command, args []string) (job.RateLimit, error) {
	if f.clear {
		if cmd.Flags().Changed("burst") || f.strict || cmd.Flags().Changed("slack") {
			return job.RateLimit{}, usagef("--burst, --strict and --slack go with a limit, not with --clear")
		}
		return job.RateLimit{}, nil
	}
	r, err := parseRate(args[1])
	if err != nil {
		return job.RateLimit{}, err
	}
	switch {
	case f.burst < 0:
		return job.RateLimit{}, usagef("invalid --burst %d: must not be negative", f.burst)
	case f.strict && cmd.Flags().Changed("burst"):
		return job.RateLimit{}, usagef("--burst goes with a token-bucket limit, not with --strict (a strict window allows COUNT at once)")
	case f.slack < 0:
		return job.RateLimit{}, usagef("invalid --slack %s: must not be negative", f.slack)
	case f.slack > 0 && !f.strict:
		return job.RateLimit{}, usagef("--slack widens a --strict window only")
	}
	r.Burst, r.Strict, r.Slack = f.burst, f.strict, f.slack
	return r, nil
}

// json is the --json output of a limit set or cleared, without the
// queue and what it applies to.
func (f *rateFlags) json(r job.RateLimit) map[string]any {
	out := map[string]any{"count": r.Count, "per_ms": r.Per.Milliseconds(), "burst": max(r.Burst, 1),
		"strict": r.Strict, "slack_ms": r.Slack.Milliseconds(), "cleared": f.clear}
	if r.Strict {
		out["burst"] = r.Count
	}
	return out
}

// parseRate reads COUNT/PERIOD: "10/1s", "600/1m", "5/250ms".
func parseRate(s string) (job.RateLimit, error) {
	c, p, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(c)
	if !ok || err != nil || n <= 0 {
		return job.RateLimit{}, usagef("invalid limit %q: want COUNT/PERIOD with a positive whole COUNT, e.g. 10/1s", s)
	}
	per, err := time.ParseDuration(p)
	if err != nil || per < time.Millisecond {
		return job.RateLimit{}, usagef("invalid limit %q: the period must be a duration of at least 1ms, e.g. 1s, 1m, 250ms", s)
	}
	return job.RateLimit{Count: n, Per: per}, nil
}

// rateText is "10/1s" or "10/1s burst 5".
func rateText(r job.RateLimit) string {
	s := strconv.Itoa(r.Count) + "/" + fmtDur(r.Per)
	if r.Strict {
		s += " strict"
		if r.Slack > 0 {
			s += " slack " + fmtDur(r.Slack)
		}
	} else if r.Burst > 1 {
		s += " burst " + strconv.Itoa(r.Burst)
	}
	return s
}

// limitsText renders a queue's rate limits as capsText does its caps.
func limitsText(limits map[string]job.RateLimit) string {
	if len(limits) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(limits))
	for k := range limits {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = rateText(limits[k])
		if k != "*" && k != "" {
			parts[i] = k + "=" + parts[i]
		}
	}
	return strings.Join(parts, ",")
}

// forgetCommand is "queues forget".
func (a *app) forgetCommand() *cobra.Command {
	var idle string
	cmd := &cobra.Command{
		Use:   "forget (QUEUE | --idle DURATION)",
		Short: "Remove a queue that holds nothing from the namespace (a typo, a queue no longer used)",
		Long: `Remove a queue with nothing in it from the namespace: stats, queues ls, the
dashboard and the metrics no longer list it, and its pause, caps and limits
are gone. A queue that holds jobs (scheduled, processing, parked, held), dead
records or remembered unique job ids is refused, and the error names what is
left. The next enqueue to the name, from a process started after, lists it
again; forget queues that no running producer or worker uses.

With --idle DURATION instead of a queue, every queue nobody used for that
long (at least 1h; 168h is a week) that holds nothing and has no pause, cap,
rate limit or key cap set is unlisted, as workers do by themselves
(the same pass), and their names are printed.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if idle != "" {
				if len(args) != 0 {
					return usagef("give a queue or --idle, not both")
				}
				return nil
			}
			return exactArgs(1, "one queue name (or --idle DURATION)")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if idle != "" {
				return a.forgetIdle(cmd.Context(), idle)
			}
			q := args[0]
			if err := checkQueueType(q, ""); err != nil {
				return err
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := protocol.Admin(b).Forget(cmd.Context(), q); err != nil {
				if errors.Is(err, admin.ErrUnknownQueue) {
					return fmt.Errorf("queue %q is not known in namespace %s: nothing to forget", q, b.Namespace())
				}
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"queue": q, "forgotten": true})
			}
			_, err = fmt.Fprintln(a.stdout, termSafe("forgot queue "+q, false))
			return err
		},
	}
	cmd.Flags().StringVar(&idle, "idle", "", "forget every queue unused for this long that holds nothing (at least 1h), instead of one queue")
	return cmd
}

// forgetIdle is "queues forget --idle": it prints the queues it forgot,
// those forgotten before a failure too.
func (a *app) forgetIdle(ctx context.Context, v string) error {
	idle, err := time.ParseDuration(v)
	if err != nil || idle < admin.MinForgetIdle {
		return usagef("invalid --idle %q: want a duration of at least %s, such as 168h for a week", v, admin.MinForgetIdle)
	}
	b, err := a.broker(ctx)
	if err != nil {
		return err
	}
	forgotten, ferr := protocol.Admin(b).ForgetIdle(ctx, idle)
	if a.json {
		if forgotten == nil {
			forgotten = []string{}
		}
		if err := a.printJSON(map[string]any{"idle_ms": idle.Milliseconds(), "forgotten": forgotten}); err != nil {
			return err
		}
		return ferr
	}
	if len(forgotten) == 0 && ferr == nil {
		_, err := fmt.Fprintf(a.stdout, "no queue that holds nothing was unused for %s: nothing forgotten\n", fmtDur(idle))
		return err
	}
	for _, q := range forgotten {
		if _, err := fmt.Fprintln(a.stdout, termSafe("forgot idle queue "+q, false)); err != nil {
			return err
		}
	}
	return ferr
}

// capCommand is "queues cap".
func (a *app) capCommand() *cobra.Command {
	var (
		typ    string
		create bool
	)
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
			if err := knownQueue(cmd.Context(), b, q, create); err != nil {
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
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

// checkQueueType checks a queue argument and a --type flag ("" for none):
// a usage error naming the bad one.
func checkQueueType(q, typ string) error {
	if err := naming.Queue(q); err != nil {
		return usagef("invalid queue: %v", err)
	}
	if typ != "" {
		if err := naming.Type(typ); err != nil {
			return usagef("invalid --type: %v", err)
		}
	}
	return nil
}

// capsText renders a queue's concurrency caps: "5" for the queue's,
// "report.build=2" for a type's, comma-separated; "-" for none.
// heldText is the HELD column: the jobs held by caps, then those held by
// each type's rate limit ("12 rate:sms.send=30").
// parkedText is the PARKED column: the parked jobs, then "parked:TYPE=N"
// for each type holding some, by name.
func parkedText(parked int64, byType map[string]int64) string {
	out := num(parked)
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		out += " parked:" + t + "=" + num(byType[t])
	}
	return out
}

func heldText(held int64, byCap map[string]int64, byKey int64, byRate map[string]int64) string {
	out := num(held)
	for _, t := range slices.Sorted(maps.Keys(byCap)) {
		out += " cap:" + t + "=" + num(byCap[t])
	}
	if byKey > 0 {
		out += " keys=" + num(byKey)
	}
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
	var (
		typ    string
		create bool
	)
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
			if err := knownQueue(cmd.Context(), b, q, create); err != nil {
				return err
			}
			return a.setPause(cmd.Context(), b, q, typ, pause)
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "only this job type of the queue")
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

func (a *app) setPause(ctx context.Context, b *broker.Broker, q, typ string, pause bool) error {
	var (
		back int64
		err  error
	)
	if pause {
		err = b.Pause(ctx, q, typ)
	} else {
		back, err = b.Resume(ctx, q, typ)
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
	// FairKeys: fair turns between keys are on (keys fair).
	FairKeys bool  `json:"fair_keys"`
	Parked   int64 `json:"parked"`
	// ParkedByType: Parked by type, the types holding parked jobs only.
	ParkedByType map[string]int64 `json:"parked_by_type"`
	// Caps: the concurrency caps, "" for the queue's, else by type.
	Caps map[string]int `json:"caps"`
	// Limits: the rate limits, "*" for the queue's, else by type.
	Limits map[string]limitJSON `json:"limits"`
	// Held: due jobs of capped types waiting for a slot; HeldByCap the
	// same by type.
	Held      int64            `json:"held"`
	HeldByCap map[string]int64 `json:"held_by_cap"`
	// HeldByKey: the part of Held that per-key caps hold.
	HeldByKey int64 `json:"held_by_key"`
	// HeldByRate: due jobs held by the rate limit of their type, by type
	// (counted in Scheduled and Due too).
	HeldByRate map[string]int64 `json:"held_by_rate"`
	Scheduled  int64            `json:"scheduled"`
	Due        int64            `json:"due"`
	Processing int64            `json:"processing"`
	Dead       int64            `json:"dead"`
	deadTrimmedJSON
	// ServedBy: live processes serving the queue; HeldUnserved: jobs are
	// processing and none does.
	ServedBy     int  `json:"served_by"`
	HeldUnserved bool `json:"held_unserved"`
}

type limitJSON struct {
	Count int   `json:"count"`
	PerMS int64 `json:"per_ms"`
	Burst int   `json:"burst"`
	// Strict: a sliding window of PerMS + SlackMS (Burst is then Count).
	Strict  bool  `json:"strict"`
	SlackMS int64 `json:"slack_ms"`
}

func (a *app) listQueues(ctx context.Context, b *broker.Broker) error {
	all, err := b.Stats(ctx)
	bad, err := leftOut(err)
	if err != nil {
		return err
	}
	procs, err := fleet.List(ctx, b.Client(), b.Namespace())
	if err != nil {
		return err
	}
	if a.json {
		out := make([]queueJSON, len(all))
		for i, s := range all {
			out[i] = queueJSON{Queue: s.Queue, Paused: s.Paused, PausedTypes: s.PausedTypes, FairKeys: s.FairKeys, Parked: s.Parked, ParkedByType: s.ParkedByType,
				Caps: s.Caps, Held: s.Held, HeldByCap: s.HeldByCap, HeldByKey: s.HeldByKey, HeldByRate: s.HeldByRate, Scheduled: s.Scheduled, Due: s.Due, Processing: s.Processing,
				Dead: s.Dead, deadTrimmedJSON: trimmedOf(s),
				Limits: map[string]limitJSON{}, ServedBy: len(procs.Serving(s.Queue)), HeldUnserved: heldUnserved(s, procs)}
			for k, r := range s.RateLimits {
				l := limitJSON{Count: r.Count, PerMS: r.Per.Milliseconds(), Burst: max(r.Burst, 1), Strict: r.Strict, SlackMS: r.Slack.Milliseconds()}
				if r.Strict {
					l.Burst = r.Count
				}
				out[i].Limits[k] = l
			}
			if out[i].PausedTypes == nil {
				out[i].PausedTypes = []string{}
			}
			if out[i].Caps == nil {
				out[i].Caps = map[string]int{}
			}
			if out[i].HeldByCap == nil {
				out[i].HeldByCap = map[string]int64{}
			}
			if out[i].ParkedByType == nil {
				out[i].ParkedByType = map[string]int64{}
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
	t := newTable(a.stdout, "QUEUE", "STATE", "PAUSED TYPES", "PARKED", "CAPS", "HELD", "LIMITS", "SCHEDULED", "DUE", "PROCESSING", "DEAD", "TRIMMED", "WORKERS")
	for _, s := range all {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		if s.FairKeys {
			state += ", fair turns"
		}
		types := "-"
		if len(s.PausedTypes) > 0 {
			types = strings.Join(s.PausedTypes, ",")
		}
		workers := strconv.Itoa(len(procs.Serving(s.Queue)))
		if heldUnserved(s, procs) {
			workers += " (jobs held)"
		}
		t.row(s.Queue, state, types, parkedText(s.Parked, s.ParkedByType), capsText(s.Caps), heldText(s.Held, s.HeldByCap, s.HeldByKey, s.HeldByRate), limitsText(s.RateLimits), num(s.Scheduled), num(s.Due), num(s.Processing), num(s.Dead), trimmedText(s), workers)
	}
	return t.flush()
}
