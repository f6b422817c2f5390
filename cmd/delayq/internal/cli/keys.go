package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

func (a *app) keysCommand() *cobra.Command {
	return group("keys", "List the flow-control keys holding jobs back and why; cap, rate-limit, pause and resume the jobs of keys; fair turns between keys and their weights",
		a.keysListCommand(), a.keyCapCommand(), a.keyLimitCommand(), a.keyPauseCommand(true), a.keyPauseCommand(false), a.keyFairCommand(), a.keyWeightCommand())
}

// keysListCommand is "keys ls".
func (a *app) keysListCommand() *cobra.Command {
	var top int
	cmd := &cobra.Command{
		Use:   "ls QUEUE [--top N]",
		Short: "List the keys of a queue holding the most jobs back, and why (pause, cap, rate limit or fair turns)",
		Long: `List the keys (job.Key, job.KeyFrom) of a queue holding the most jobs back,
the most first: per key its held jobs, its running jobs (counted under a key
cap), its concurrency cap and its rate limit (each its own, marked (own), or
the queue's default), whether it is paused, and why its jobs wait: paused,
cap (its running jobs fill its cap), rate (they wait for its next token) or
turn (fair turns are on and they wait for its turn: delayq keys fair).
A WEIGHT column gives the keys' weights in the fair turns (delayq keys
weight) when a listed key's is not 1; --json always gives weight.
While fewer than N keys hold jobs, paused keys holding nothing are listed
too. The last line gives the queue's default key cap and key rate limit
(delayq keys cap, delayq keys limit) and whether fair turns between keys are
on or off (delayq keys fair). The read costs O(N), whatever the number of
keys, and one more round trip for the queue's stats.`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := naming.Queue(q); err != nil {
				return usagef("invalid queue: %v", err)
			}
			if top < 1 || top > admin.MaxHeldKeys {
				return usagef("invalid --top %d: want 1 to %d", top, admin.MaxHeldKeys)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := protocol.Admin(b).MustKnow(cmd.Context(), q); err != nil {
				if errors.Is(err, admin.ErrUnknownQueue) {
					return fmt.Errorf("queue %q was never used in namespace %s (a typo? see delayq queues ls)", q, b.Namespace())
				}
				return err
			}
			hk, err := b.HeldKeys(cmd.Context(), q, top)
			if err != nil {
				return err
			}
			sts, err := b.Stats(cmd.Context(), q)
			if err != nil {
				return err
			}
			st := sts[0]
			return a.printHeldKeys(q, hk, st.FairKeys)
		},
	}
	cmd.Flags().IntVar(&top, "top", 20, "how many keys to list, the most held first (1 to 1000)")
	return cmd
}

type heldKeyJSON struct {
	Key     string `json:"key"`
	Held    int64  `json:"held"`
	Running int64  `json:"running"`
	// Cap: the key's concurrency cap, its own when OwnCap, else the
	// queue's default; 0 for none.
	Cap    int  `json:"cap"`
	OwnCap bool `json:"own_cap"`
	// Rate: the key's rate limit as COUNT/PERIOD (see queues ls), its own
	// when OwnRate, else the queue's default; "" for none.
	Rate    string `json:"rate"`
	OwnRate bool   `json:"own_rate"`
	// WaitsForToken: some of its held jobs wait for its next token.
	WaitsForToken bool `json:"waits_for_token"`
	// WaitsForTurn: its held jobs wait for its turn (keys fair).
	WaitsForTurn bool `json:"waits_for_turn"`
	// Weight: the key's weight in the fair turns (keys weight), 1
	// unless set.
	Weight int    `json:"weight"`
	Paused bool   `json:"paused"`
	Reason string `json:"reason"`
}

// keyRateText is a key rate limit as in queues ls ("10/1s burst 5",
// "1/1m strict"), "" for none.
func keyRateText(r job.RateLimit) string {
	if r.Count == 0 {
		return ""
	}
	return rateText(r)
}

// printHeldKeys prints keys ls: hk, and fair, whether fair turns between
// keys are on in the queue (QueueStats.FairKeys).
func (a *app) printHeldKeys(q string, hk broker.HeldKeys, fair bool) error {
	if a.json {
		keys := make([]heldKeyJSON, len(hk.Keys))
		for i, k := range hk.Keys {
			keys[i] = heldKeyJSON{Key: k.Key, Held: k.Held, Running: k.Running, Cap: k.Cap, OwnCap: k.OwnCap, Rate: keyRateText(k.Rate), OwnRate: k.OwnRate,
				WaitsForToken: k.WaitsForToken, WaitsForTurn: k.WaitsForTurn, Weight: max(k.Weight, 1), Paused: k.Paused, Reason: k.Reason}
		}
		return a.printJSON(map[string]any{"queue": q, "holding": hk.Holding, "paused_keys": hk.PausedKeys, "default_cap": hk.DefaultCap,
			"default_rate": keyRateText(hk.DefaultRate), "fair_keys": fair, "keys": keys})
	}
	defCap, defRate := "none", "none"
	if hk.DefaultCap > 0 {
		defCap = strconv.Itoa(hk.DefaultCap)
	}
	if hk.DefaultRate.Count > 0 {
		defRate = rateText(hk.DefaultRate)
	}
	turns := "off"
	if fair {
		turns = "on"
	}
	defaults := "default key cap " + defCap + ", default key rate " + defRate + ", fair turns " + turns
	if len(hk.Keys) == 0 {
		msg := "no key holds jobs back in queue " + q + ", and none is paused"
		if hk.DefaultCap > 0 || hk.DefaultRate.Count > 0 || fair {
			msg += "; " + defaults
		}
		_, err := fmt.Fprintln(a.stdout, termSafe(msg, false))
		return err
	}
	// WEIGHT only when some key listed has a weight of its own.
	weighted := false
	for _, k := range hk.Keys {
		weighted = weighted || k.Weight > 1
	}
	cols := []string{"KEY", "HELD", "RUNNING", "CAP", "RATE", "PAUSED", "REASON"}
	if weighted {
		cols = []string{"KEY", "HELD", "RUNNING", "CAP", "RATE", "WEIGHT", "PAUSED", "REASON"}
	}
	t := newTable(a.stdout, cols...)
	for _, k := range hk.Keys {
		c := "-"
		if k.Cap > 0 {
			c = strconv.Itoa(k.Cap)
			if k.OwnCap {
				c += " (own)"
			}
		}
		rate := "-"
		if k.Rate.Count > 0 {
			rate = rateText(k.Rate)
			if k.OwnRate {
				rate += " (own)"
			}
		}
		paused := "no"
		if k.Paused {
			paused = "yes"
		}
		if weighted {
			t.row(k.Key, num(k.Held), num(k.Running), c, rate, strconv.Itoa(max(k.Weight, 1)), paused, k.Reason)
			continue
		}
		t.row(k.Key, num(k.Held), num(k.Running), c, rate, paused, k.Reason)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(a.stdout, termSafe(fmt.Sprintf("%d keys hold jobs back, %d paused; %s", hk.Holding, hk.PausedKeys, defaults), false))
	return err
}

// keyFlag checks the --key flag of keys cap and keys limit: left out
// ("") it means the default of every key; given, it must be a valid key.
func keyFlag(cmd *cobra.Command, key string) error {
	if key == "" {
		if cmd.Flags().Changed("key") {
			return usagef("invalid --key: it is empty (leave --key out to set the default of every key)")
		}
		return nil
	}
	if err := naming.Key(key); err != nil {
		return usagef("invalid --key: %v", err)
	}
	return nil
}

// keyTarget names what a key control applies to in a message: "key K in
// queue Q", or for the default "each key of queue Q".
func keyTarget(q, key string) string {
	if key == "" {
		return "each key of queue " + q
	}
	return "key " + key + " in queue " + q
}

// keyCapCommand is "keys cap".
func (a *app) keyCapCommand() *cobra.Command {
	var (
		key    string
		create bool
	)
	cmd := &cobra.Command{
		Use:   "cap QUEUE N [--key KEY]",
		Short: "Cap how many jobs of each key (or of one key with --key) of a queue run at once across all workers",
		Long: `Cap how many jobs of each key (job.Key, job.KeyFrom) of a queue run at once
across all workers: without --key the default cap of every key, with --key
KEY that key's own cap, which wins over the default. N = 0 clears it: a
cleared default leaves the keys without a cap of their own uncapped, a
cleared key's cap leaves the key to the default. A due job of a key at its
cap is held aside (no attempt spent) until a job of its key ends; the other
keys' jobs are claimed. A change takes effect at once for the jobs already
held. Jobs without a key are not counted. A sharded queue's cap is split
among its shards, so N must be at least the number of shards.`,
		Args: exactArgs(2, "a queue name and a cap"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := naming.Queue(q); err != nil {
				return usagef("invalid queue: %v", err)
			}
			if err := keyFlag(cmd, key); err != nil {
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
			if err := b.SetKeyConcurrency(cmd.Context(), q, key, n); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"queue": q, "key": key, "cap": n})
			}
			msg := fmt.Sprintf("capped %s at %d running", keyTarget(q, key), n)
			switch {
			case n > 0 && key == "":
				msg += " (the default: a key's own cap wins)"
			case n == 0 && key == "":
				msg = "cleared the default key cap of queue " + q + " (keys with a cap of their own keep it)"
			case n == 0:
				msg = "cleared the own cap of key " + key + " in queue " + q + " (the default key cap applies to it)"
			}
			_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
			return err
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "only this key (default: the cap of every key without one of its own)")
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

// keyLimitCommand is "keys limit".
func (a *app) keyLimitCommand() *cobra.Command {
	var (
		key    string
		create bool
		rf     rateFlags
	)
	cmd := &cobra.Command{
		Use:   "limit QUEUE [COUNT/PERIOD] [--key KEY] [--burst N | --strict [--slack D]] | --clear",
		Short: "Limit how many jobs of each key (or of one key with --key) of a queue start per period across all workers",
		Long: `Limit how many jobs of each key (job.Key, job.KeyFrom) of a queue start per
period across all workers: without --key the default limit of every key, with
--key KEY that key's own limit, which wins over the default. COUNT/PERIOD,
--burst, --strict and --slack are as for delayq queues limit: e.g. 10/1s,
600/1m; --burst N lets N jobs of a key start at once after a quiet spell
(default 1); --strict makes it a sliding window of PERIOD (+ --slack) that
never admits more than COUNT claims of the key. A due job of a key without a
token is held aside (no attempt spent; keys ls gives the reason "rate") until
its key's next token; the other keys' jobs are claimed. --clear removes the
limit: a cleared default leaves the keys without a limit of their own
unlimited, a cleared key's limit leaves the key to the default. Jobs without
a key are not limited. A sharded queue's rate is split among its shards.`,
		Args: rf.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := naming.Queue(q); err != nil {
				return usagef("invalid queue: %v", err)
			}
			if err := keyFlag(cmd, key); err != nil {
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
			if err := b.SetKeyRateLimit(cmd.Context(), q, key, r); err != nil {
				return err
			}
			if a.json {
				out := rf.json(r)
				out["queue"], out["key"] = q, key
				return a.printJSON(out)
			}
			msg := fmt.Sprintf("limited %s to %s", keyTarget(q, key), rateText(r))
			switch {
			case !rf.clear && key == "":
				msg += " (the default: a key's own limit wins)"
			case rf.clear && key == "":
				msg = "cleared the default key rate limit of queue " + q + " (keys with a limit of their own keep it)"
			case rf.clear:
				msg = "cleared the own rate limit of key " + key + " in queue " + q + " (the default key rate limit applies to it)"
			}
			_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
			return err
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "only this key (default: the limit of every key without one of its own)")
	rf.add(cmd)
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

// checkQueueKey checks a queue and a key argument: a usage error naming
// the bad one.
func checkQueueKey(q, key string) error {
	if err := naming.Queue(q); err != nil {
		return usagef("invalid queue: %v", err)
	}
	if err := naming.Key(key); err != nil {
		return usagef("invalid key: %v", err)
	}
	return nil
}

// keyPauseCommand is "keys pause" (pause) or "keys resume".
func (a *app) keyPauseCommand(pause bool) *cobra.Command {
	var create bool
	use, short, long := "resume QUEUE KEY", "Resume the jobs of a paused key",
		`Resume the jobs of one key (job.Key, job.KeyFrom) in a queue: its held jobs
go back to the schedule at their ready times (due at once) and the queue's
workers are woken; the count of them is printed. A key that also has a
concurrency cap is held by its cap again once at it. Resuming a key that is
not paused changes nothing.`
	if pause {
		use, short, long = "pause QUEUE KEY", "Pause the jobs of one key of a queue",
			`Pause the jobs of one key (job.Key, job.KeyFrom) in a queue, on every shard:
from now on a claim holds its due jobs aside (no attempt spent) as for a key
at its concurrency cap, and claims the other keys' jobs. Jobs of the key
already running run to their end. Pausing a paused key changes nothing.`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  exactArgs(2, "a queue name and a key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, key := args[0], args[1]
			if err := checkQueueKey(q, key); err != nil {
				return err
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := knownQueue(cmd.Context(), b, q, create); err != nil {
				return err
			}
			return a.setKeyPause(cmd.Context(), b, q, key, pause)
		},
	}
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

func (a *app) setKeyPause(ctx context.Context, b *broker.Broker, q, key string, pause bool) error {
	var (
		back int64
		err  error
	)
	if pause {
		err = b.PauseKey(ctx, q, key)
	} else {
		back, err = b.ResumeKey(ctx, q, key)
	}
	if err != nil {
		return err
	}
	if a.json {
		out := map[string]any{"queue": q, "key": key, "paused": pause}
		if !pause {
			out["held_jobs_back"] = back
		}
		return a.printJSON(out)
	}
	msg := "paused key " + key + " in queue " + q
	if !pause {
		msg = fmt.Sprintf("resumed key %s in queue %s: %d held jobs back on the schedule", key, q, back)
	}
	_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
	return err
}

// keyFairCommand is "keys fair".
func (a *app) keyFairCommand() *cobra.Command {
	var create bool
	cmd := &cobra.Command{
		Use:   "fair QUEUE on|off",
		Short: "Turn fair turns between the keys of a queue on or off",
		Long: `Turn fair turns between the keys (job.Key, job.KeyFrom) of a queue on or off,
on every shard. While on, a claim deals its room out among the keys with due
jobs in turns, an equal share each (the jobs without a key taking their turns
as one key), instead of taking due jobs in ready order: one key's backlog
delays another key's due job by at most one turn of the keys ahead of it.
Within a key, jobs start in ready order. A key's due jobs wait for its turn
in its held set (pending, no attempt spent; keys ls gives the reason "turn"),
and every other control (pauses, caps, rate limits) still applies to the jobs
a turn chooses. Turned off, the jobs waiting for a turn go back to the
schedule and are claimed in ready order again. Either way the queue's workers
are woken. Whether the turns are on shows in queues ls, in stats --json
(fair_keys) and on the last line of keys ls, which lists the keys waiting
for their turn.`,
		Args: exactArgs(2, "a queue name and on or off"),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return []string{"on", "off"}, cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := naming.Queue(q); err != nil {
				return usagef("invalid queue: %v", err)
			}
			var on bool
			switch args[1] {
			case "on":
				on = true
			case "off":
			default:
				return usagef("invalid switch %q: want on or off", args[1])
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := knownQueue(cmd.Context(), b, q, create); err != nil {
				return err
			}
			if err := b.SetKeyFairness(cmd.Context(), q, on); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"queue": q, "fair": on})
			}
			msg := "fair turns between keys on in queue " + q
			if !on {
				msg = "fair turns between keys off in queue " + q + " (the jobs waiting for a turn went back to the schedule)"
			}
			_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
			return err
		},
	}
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

// keyWeightCommand is "keys weight".
func (a *app) keyWeightCommand() *cobra.Command {
	var create bool
	cmd := &cobra.Command{
		Use:   "weight QUEUE KEY N",
		Short: "Set the weight of one key in the fair turns between the keys of a queue",
		Long: `Set the weight of one key (job.Key, job.KeyFrom) in the fair turns between the
keys of a queue (delayq keys fair), on every shard: its share of each turn
relative to the other keys', so that a key of weight 3 starts 3 jobs for
each 1 of a key of weight 1 while both have due jobs and the claim has room
for them. N is 1 to 1000; every key's weight is 1 unless set, and N = 1
removes the key's own weight. A weight may be set whether the turns are on
or off, and takes effect while they are on. A turn that a claim's room
cuts short goes on in the next claim, so workers claiming one job at a
time keep to the weights too. Setting the same weight again changes
nothing. keys ls shows the weights of the keys it lists.`,
		Args: exactArgs(3, "a queue name, a key and a weight"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, key := args[0], args[1]
			if err := checkQueueKey(q, key); err != nil {
				return err
			}
			w, err := strconv.Atoi(args[2])
			if err != nil || w < 1 || w > maxKeyWeight {
				return usagef("invalid weight %q: want a whole number 1 to %d (1 removes the key's own weight)", args[2], maxKeyWeight)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := knownQueue(cmd.Context(), b, q, create); err != nil {
				return err
			}
			if err := b.SetKeyWeight(cmd.Context(), q, key, w); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"queue": q, "key": key, "weight": w})
			}
			msg := fmt.Sprintf("set the weight of key %s in queue %s to %d in the fair turns", key, q, w)
			if w == 1 {
				msg = "key " + key + " in queue " + q + " back to weight 1 in the fair turns"
			}
			_, err = fmt.Fprintln(a.stdout, termSafe(msg, false))
			return err
		},
	}
	cmd.Flags().BoolVar(&create, "create", false, createUsage)
	return cmd
}

// maxKeyWeight is the highest weight keys weight takes, as
// Broker.SetKeyWeight.
const maxKeyWeight = 1000
