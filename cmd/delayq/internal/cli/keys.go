package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/naming"
)

func (a *app) keysCommand() *cobra.Command {
	return group("keys", "List the keys holding jobs back; pause and resume the jobs of one flow-control key", a.keysListCommand(), a.keyPauseCommand(true), a.keyPauseCommand(false))
}

// keysListCommand is "keys ls".
func (a *app) keysListCommand() *cobra.Command {
	var top int
	cmd := &cobra.Command{
		Use:   "ls QUEUE [--top N]",
		Short: "List the keys of a queue holding the most jobs back, and why (cap or pause)",
		Long: `List the keys (job.Key, job.KeyFrom) of a queue holding the most jobs back,
the most first: per key its held jobs, its running jobs (counted under a key
cap), its concurrency cap (own, or the queue's default), whether it is
paused, and why its jobs wait (paused, or cap). While fewer than N keys hold
jobs, paused keys holding nothing are listed too. The read costs O(N),
whatever the number of keys.`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := naming.Queue(q); err != nil {
				return usagef("invalid queue: %v", err)
			}
			if top < 1 || top > broker.MaxHeldKeys {
				return usagef("invalid --top %d: want 1 to %d", top, broker.MaxHeldKeys)
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			if err := b.MustKnow(cmd.Context(), q); err != nil {
				if errors.Is(err, broker.ErrUnknownQueue) {
					return fmt.Errorf("queue %q was never used in namespace %s (a typo? see delayq queues ls)", q, b.Namespace())
				}
				return err
			}
			hk, err := b.HeldKeys(cmd.Context(), q, top)
			if err != nil {
				return err
			}
			return a.printHeldKeys(q, hk)
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
	Cap    int    `json:"cap"`
	OwnCap bool   `json:"own_cap"`
	Paused bool   `json:"paused"`
	Reason string `json:"reason"`
}

func (a *app) printHeldKeys(q string, hk broker.HeldKeys) error {
	if a.json {
		keys := make([]heldKeyJSON, len(hk.Keys))
		for i, k := range hk.Keys {
			keys[i] = heldKeyJSON{Key: k.Key, Held: k.Held, Running: k.Running, Cap: k.Cap, OwnCap: k.OwnCap, Paused: k.Paused, Reason: k.Reason}
		}
		return a.printJSON(map[string]any{"queue": q, "holding": hk.Holding, "paused_keys": hk.PausedKeys, "default_cap": hk.DefaultCap, "keys": keys})
	}
	if len(hk.Keys) == 0 {
		_, err := fmt.Fprintln(a.stdout, termSafe("no key holds jobs back in queue "+q+", and none is paused", false))
		return err
	}
	t := newTable(a.stdout, "KEY", "HELD", "RUNNING", "CAP", "PAUSED", "REASON")
	for _, k := range hk.Keys {
		c := "-"
		if k.Cap > 0 {
			c = strconv.Itoa(k.Cap)
			if k.OwnCap {
				c += " (own)"
			}
		}
		paused := "no"
		if k.Paused {
			paused = "yes"
		}
		t.row(k.Key, num(k.Held), num(k.Running), c, paused, k.Reason)
	}
	if err := t.flush(); err != nil {
		return err
	}
	def := "none"
	if hk.DefaultCap > 0 {
		def = strconv.Itoa(hk.DefaultCap)
	}
	_, err := fmt.Fprintln(a.stdout, termSafe(fmt.Sprintf("%d keys hold jobs back, %d paused; default key cap %s", hk.Holding, hk.PausedKeys, def), false))
	return err
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
