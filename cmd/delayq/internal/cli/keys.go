package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
)

func (a *app) keysCommand() *cobra.Command {
	return group("keys", "Pause and resume the jobs of one flow-control key", a.keyPauseCommand(true), a.keyPauseCommand(false))
}

// checkQueueKey checks a queue and a key argument: a usage error naming
// the bad one.
func checkQueueKey(q, key string) error {
	if err := job.ValidateQueue(q); err != nil {
		return usagef("invalid queue: %v", err)
	}
	if err := job.ValidateKey(key); err != nil {
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
