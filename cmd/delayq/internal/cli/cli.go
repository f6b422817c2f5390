// Package cli is the delayq command-line tool: main calls Run. The commands
// are built on the broker's producer, operator and inspection API and on
// packages deadletter, fleet, periodic, outbox and dashboard (for "delayq
// dashboard").
package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// Exit statuses of Run.
const (
	ExitOK    = 0 // success
	ExitError = 1 // an operational error: Redis unreachable, job not found, …
	ExitUsage = 2 // bad usage: unknown flag, malformed value, missing argument
)

// DefaultRedisURL is used when neither --redis-url nor REDIS_URL is set.
const DefaultRedisURL = "redis://localhost:6379/0"

// Run runs the delayq command line args (without the program name) and
// returns its exit status. Errors are written to stderr as one line.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{
		stdin:     stdin,
		stdout:    stdout,
		stderr:    stderr,
		getenv:    os.Getenv,
		stdoutTTY: isTerminal(stdout),
		stderrTTY: isTerminal(stderr),
	}
	return a.run(ctx, args)
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// app holds the streams and global flags of one invocation.
type app struct {
	stdin                io.Reader
	stdout, stderr       io.Writer
	getenv               func(string) string
	stdoutTTY, stderrTTY bool

	redisURL  string
	namespace string
	json      bool
	ascii     bool   // with json: escape everything outside printable ASCII
	functions bool   // call the loaded function library instead of EVALSHA
	now       string // hidden: a fixed clock, for reproducible output

	rdb   redis.UniversalClient
	clock func() time.Time // nil: the server's clock
	ran   bool             // a command's RunE started: its errors are not about usage
}

// usageError marks an error as bad usage (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// errAborted is returned when the operator declines a confirmation.
var errAborted = errors.New("aborted: nothing changed")

// quietLogger drops go-redis's own log lines: the tool reports errors
// itself, on one line.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

var silenceRedis sync.Once

func (a *app) run(ctx context.Context, args []string) int {
	silenceRedis.Do(func() { redis.SetLogger(quietLogger{}) })
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
	if err == nil {
		return ExitOK
	}
	var ue *usageError
	usage := !a.ran || errors.As(err, &ue) || errors.Is(err, job.ErrInvalid)
	msg := termSafe(oneLine(err.Error()), false)
	if usage {
		name := "delayq"
		if cmd != nil {
			name = cmd.CommandPath()
		}
		fmt.Fprintf(a.stderr, "delayq: %s (see '%s --help')\n", msg, name)
		return ExitUsage
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		msg = "interrupted"
	}
	fmt.Fprintf(a.stderr, "delayq: %s\n", msg)
	return ExitError
}

// oneLine folds a multi-line message (a stack trace, say) into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ⏎ ")), " ")
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "delayq",
		Short: "Inspect and operate delayq queues",
		Long: `delayq inspects and operates delayq queues in Redis: queue stats,
scheduled and processing jobs, enqueueing, the dead-letter store, periodic
schedules, batches, and a web dashboard.

It connects to --redis-url (or $REDIS_URL):

  redis://[user:password@]host:port[/db]                    one server
  redis+cluster://[user:password@]host:port[,host:port...]  a Redis Cluster, from seed nodes
  redis+sentinel://[user:password@]host:port[,host:port...]/MASTER[/db]
                                                            the master that Sentinels name

with rediss://, rediss+cluster:// and rediss+sentinel:// for TLS. The user and
password are those of the data servers; Sentinels that require their own
come from $` + envSentinelUser + ` and $` + envSentinelPassword + `.

Output is a table for people, or JSON with --json. Exit status: 0 success,
1 operational error, 2 bad usage. Shell completion: delayq completion --help.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.parseGlobals()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.SetIn(a.stdin)
	root.SetOut(a.stdout) // before the completion command, which keeps it
	root.SetErr(a.stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.redisURL, "redis-url", "", "Redis URL (default $REDIS_URL, else "+DefaultRedisURL+")")
	pf.StringVar(&a.namespace, "namespace", "", "key namespace (default $DELAYQ_NAMESPACE, else "+admin.DefaultNamespace+")")
	pf.BoolVar(&a.json, "json", false, "print JSON instead of tables")
	pf.BoolVar(&a.ascii, "ascii", false, "with --json: write every character outside printable ASCII as a \\u escape (the same JSON, safe to print on a terminal)")
	pf.BoolVar(&a.functions, "functions", false, "call the function library loaded by 'delayq admin load-functions' (FCALL) instead of sending scripts, as a Redis user that may not run code of its own (default $"+envFunctions+"=1)")
	pf.StringVar(&a.now, "now", "", "use this RFC 3339 time as the clock instead of the server's (for tests)")
	_ = pf.MarkHidden("now")

	root.AddCommand(
		a.statsCommand(),
		a.queuesCommand(),
		a.keysCommand(),
		a.workersCommand(),
		a.jobsCommand(),
		a.enqueueCommand(),
		a.deadCommand(),
		a.periodicCommand(),
		a.batchesCommand(),
		a.dashboardCommand(),
		a.adminCommand(),
		a.aclCommand(),
		a.versionCommand(),
	)
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q", args[0])
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	// cobra's "completion bash|zsh|fish|powershell", added now rather than
	// at Execute so that it refuses a missing or unknown shell as bad usage.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			asGroup(c, c.Commands())
		}
	}
	a.markRun(root)
	return root
}

// markRun makes every command record that it got past flag, argument and
// required-flag checks: errors after that are operational unless marked as
// usage errors.
func (a *app) markRun(c *cobra.Command) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			a.ran = true
			return run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		a.markRun(sub)
	}
}

// group returns a parent command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short}
	c.AddCommand(subs...)
	asGroup(c, subs)
	return c
}

// asGroup makes c refuse to run without one of its subcommands, and an
// unknown one, as bad usage; the error lists subs.
func asGroup(c *cobra.Command, subs []*cobra.Command) {
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return nil
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		names := make([]string, 0, len(subs))
		for _, s := range subs {
			names = append(names, s.Name())
		}
		return usagef("%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", "))
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("expected %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}

func minArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("expected %s", what)
		}
		return nil
	}
}

// parseGlobals checks the global flags; it does not connect.
func (a *app) parseGlobals() error {
	if a.redisURL == "" {
		a.redisURL = a.getenv("REDIS_URL")
	}
	if a.redisURL == "" {
		a.redisURL = DefaultRedisURL
	}
	if a.namespace == "" {
		a.namespace = a.getenv("DELAYQ_NAMESPACE")
	}
	switch v := a.getenv(envFunctions); v {
	case "", "0":
	case "1":
		a.functions = true
	default:
		return usagef("$%s is %q: want 1 or 0", envFunctions, v)
	}
	if a.ascii && !a.json {
		return usagef("--ascii shapes JSON output: give it with --json")
	}
	if a.now != "" {
		t, err := time.Parse(time.RFC3339Nano, a.now)
		if err != nil {
			return usagef("invalid --now %q: want an RFC 3339 time", a.now)
		}
		a.clock = func() time.Time { return t }
	}
	return nil
}

// broker connects to Redis and returns a broker on the namespace. It checks
// the URL and namespace first, then that the server answers.
func (a *app) broker(ctx context.Context) (*broker.Broker, error) {
	return a.brokerWith(ctx, broker.Options{})
}

// onBroker is the RunE of a command that takes no arguments: it connects
// and runs fn.
func (a *app) onBroker(fn func(context.Context, *broker.Broker) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		b, err := a.broker(cmd.Context())
		if err != nil {
			return err
		}
		return fn(cmd.Context(), b)
	}
}

// brokerWith is broker with options; the namespace and the clock (the
// hidden --now) come from the flags.
func (a *app) brokerWith(ctx context.Context, bo broker.Options) (*broker.Broker, error) {
	tgt, err := parseTarget(a.redisURL, a.getenv)
	if err != nil {
		return nil, usagef("invalid --redis-url: %v", err)
	}
	rdb := tgt.client()
	bo.Namespace = a.namespace
	bo.Functions = bo.Functions || a.functions
	b, err := broker.New(rdb, bo)
	if err != nil {
		_ = rdb.Close()
		if errors.Is(err, job.ErrInvalid) {
			return nil, &usageError{fmt.Errorf("invalid --namespace: %w", err)}
		}
		return nil, err // the server is too old (broker.ErrServerTooOld)
	}
	if a.clock != nil {
		protocol.UseClock(b, a.clock)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("cannot connect to %s: %w", tgt, err)
	}
	if tgt.single != nil {
		// A node of a Redis Cluster answers PING, then MOVED for most keys:
		// say so at once, with the fix. CLUSTER SLOTS, not INFO: the ACL
		// recipes of docs/security.md allow it (a cluster client needs it)
		// and give no INFO; a server without cluster support refuses it.
		if slots, err := rdb.ClusterSlots(ctx).Result(); err == nil && len(slots) > 0 {
			_ = rdb.Close()
			return nil, usagef("invalid --redis-url: %s is a node of a Redis Cluster; use redis+cluster://%s (or rediss+cluster://), and the tool finds the other nodes", tgt, tgt.single.Addr)
		}
	}
	a.rdb = rdb
	return b, nil
}

// printJSON writes v as one line of JSON: stored text as it is (JSON
// escapes only C0 controls, quotes and backslashes), or with --ascii every
// character outside printable ASCII as a \u escape.
func (a *app) printJSON(v any) error {
	if !a.ascii {
		enc := json.NewEncoder(a.stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := a.stdout.Write(asciiJSON(buf.Bytes()))
	return err
}

// confirm asks the operator a yes/no question on stderr unless yes is set,
// and reads the answer from stdin. Anything but "y" or "yes", and the end of
// input (a script without --yes), refuses.
func (a *app) confirm(yes bool, question string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(a.stderr, "%s [y/N] ", termSafe(question, false))
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(a.stderr)
		return fmt.Errorf("%w (no answer; pass --yes to skip the question)", errAborted)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errAborted
}

// queueFlag adds --queue with a default.
func queueFlag(fs *pflag.FlagSet, p *string, def, usage string) {
	fs.StringVarP(p, "queue", "q", def, usage)
}

// checkQueue validates a queue name given on the command line.
func checkQueue(q string) error {
	if err := naming.Queue(q); err != nil {
		return usagef("invalid --queue: %v", err)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkTarget validates --queue and the job ids given on the command line.
func checkTarget(queue string, ids []string) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	return checkIDs(ids)
}

// brokerFor checks --queue and the job ids given on the command line, then
// connects.
func (a *app) brokerFor(ctx context.Context, queue string, ids []string) (*broker.Broker, error) {
	if err := checkTarget(queue, ids); err != nil {
		return nil, err
	}
	return a.broker(ctx)
}

// showCommand is "show ID [--queue Q]": it checks the queue and the id,
// connects and hands both to show. Without --queue, the queue is the one
// whose has finds the id (searched in every queue, see locate).
func (a *app) showCommand(short string, has finder, show func(ctx context.Context, b *broker.Broker, queue, id string) error) *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: short,
		Args:  exactArgs(1, "one job id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.brokerFor(cmd.Context(), queue, args)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("queue") {
				if queue, err = a.locateWith(cmd.Context(), b, args[0], has); err != nil {
					return err
				}
			}
			return show(cmd.Context(), b, queue, args[0])
		},
	}
	queueFlag(cmd.Flags(), &queue, naming.DefaultQueue, "queue (default: the one queue that holds the id, searched in every queue)")
	return cmd
}

// checkIDs validates job ids given on the command line.
func checkIDs(ids []string) error {
	for _, id := range ids {
		if err := naming.ID(id); err != nil {
			return usagef("invalid job id: %v", err)
		}
	}
	return nil
}
