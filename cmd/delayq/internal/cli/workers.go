package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
)

func (a *app) workersCommand() *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the live processes: workers, periodic schedulers, outbox relays",
		Long: `List the live processes of the namespace, as they last recorded themselves
in the process registry (package fleet): role, host and pid, version, the
queues they serve (with their concurrency), the job types they handle, how
many jobs they hold, when they started and when they were last seen.

A process records itself every third of its expiry (15 s by default); one
killed with SIGKILL is listed until its expiry after its last record, then
never again. Times are the Redis server's.`,
		Args: noArgs,
		RunE: a.onBroker(a.listWorkers),
	}
	c := group("workers", "List the live processes (workers, schedulers, outbox relays)", ls)
	c.Aliases = []string{"processes"}
	return c
}

// processJSON is one process in "workers ls --json".
type processJSON struct {
	ID        string            `json:"id"`
	Role      string            `json:"role"`
	Host      string            `json:"host"`
	PID       int               `json:"pid"`
	Version   string            `json:"version"`
	Queues    []fleet.Queue     `json:"queues"`
	Types     []string          `json:"types"`
	Info      map[string]string `json:"info,omitempty"`
	Held      int               `json:"held"`
	HeldJobs  []fleet.HeldJob   `json:"held_jobs"`
	Started   *string           `json:"started"`
	Seen      *string           `json:"seen"`
	Expires   *string           `json:"expires"`
	TTLMillis int64             `json:"ttl_ms"`
}

func (a *app) listWorkers(ctx context.Context, b *broker.Broker) error {
	snap, err := fleet.List(ctx, b.Client(), b.Namespace())
	if err != nil {
		return err
	}
	if a.json {
		out := make([]processJSON, len(snap.Processes))
		for i, p := range snap.Processes {
			out[i] = processJSON{ID: p.ID, Role: p.Role, Host: p.Host, PID: p.PID, Version: p.Version,
				Queues: p.Queues, Types: p.Types, Info: p.Info, Held: p.Held, HeldJobs: p.HeldJobs,
				Started: jsonTime(p.Started), Seen: jsonTime(p.Seen), Expires: jsonTime(p.Expires), TTLMillis: p.TTL.Milliseconds()}
			if out[i].Queues == nil {
				out[i].Queues = []fleet.Queue{}
			}
			if out[i].Types == nil {
				out[i].Types = []string{}
			}
			if out[i].HeldJobs == nil {
				out[i].HeldJobs = []fleet.HeldJob{}
			}
		}
		return a.printJSON(map[string]any{"now": jsonTime(snap.Now), "processes": out, "more": snap.More})
	}
	if len(snap.Processes) == 0 {
		_, err := fmt.Fprintln(a.stdout, "no live processes in namespace", b.Namespace()+": no worker, scheduler or relay recorded itself within its expiry")
		return err
	}
	t := newTable(a.stdout, "ROLE", "HOST", "PID", "VERSION", "QUEUES", "TYPES", "HELD", "STARTED", "SEEN")
	for _, p := range snap.Processes {
		t.row(p.Role, p.Host, strconv.Itoa(p.PID), p.Version, queuesText(p), typesText(p), strconv.Itoa(p.Held),
			relative(p.Started, snap.Now), relative(p.Seen, snap.Now))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if snap.More > 0 {
		fmt.Fprintf(a.stdout, "and %d more processes, not listed\n", snap.More)
	}
	return nil
}

// queuesText is "orders×20,mail×4", "-" for none; a relay or scheduler
// shows what it records instead (its table, its schedules).
func queuesText(p fleet.Process) string {
	if len(p.Queues) == 0 {
		switch {
		case p.Info["table"] != "":
			return "table " + p.Info["table"]
		case p.Info["schedules"] != "":
			return p.Info["schedules"] + " schedules"
		}
		return "-"
	}
	parts := make([]string, len(p.Queues))
	for i, q := range p.Queues {
		parts[i] = q.Name
		if q.Concurrency > 0 {
			parts[i] += "×" + strconv.Itoa(q.Concurrency)
		}
	}
	return clip(strings.Join(parts, ","), 60)
}

func typesText(p fleet.Process) string {
	if len(p.Types) == 0 {
		return "-"
	}
	return clip(strings.Join(p.Types, ","), 60)
}
