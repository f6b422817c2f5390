package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
)

// envFunctions, set to 1, has the tool call the loaded function library
// (as --functions does).
const envFunctions = "DELAYQ_FUNCTIONS"

// adminCommand is "admin": steps for a Redis user with more rights than the
// one workers and the tool run as. The function library they load lets
// that one run without any right to run code of its own
// (docs/security.md).
func (a *app) adminCommand() *cobra.Command {
	load := &cobra.Command{
		Use:   "load-functions",
		Short: "Load this version's function library into Redis (every master of a cluster)",
		Long: `Load this version's function library into Redis, into every master of a
cluster: one Redis function per script of delayq, in a library named
delayq_<version> after a hash of the scripts. Workers, producers, the tool and
the dashboard then call them (FCALL) when started with --functions
(broker.Options.Functions), as a Redis user that may not run code of its own
(delayq acl --functions prints its rules). A server that has the library keeps it; libraries
of other versions stay, for processes of other versions during a rolling
deploy (delete-functions removes one).

Run it as a user allowed FUNCTION LOAD (Redis 7), before starting processes
of a new version, and again after adding a master to a cluster.`,
		Args: noArgs,
		RunE: a.onAdmin(func(ctx context.Context, rdb redis.UniversalClient) error {
			ops, err := adminOf(rdb)
			if err != nil {
				return err
			}
			name, err := ops.LoadFunctions(ctx)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]string{"library": name})
			}
			_, err = fmt.Fprintf(a.stdout, "loaded %s\n", name)
			return err
		}),
	}
	list := &cobra.Command{
		Use:   "functions",
		Short: "List the delayq function libraries loaded in Redis",
		Long: `List the delayq function libraries loaded in Redis, with how many masters
hold each and which one is this version's. Needs a user allowed FUNCTION LIST.`,
		Args: noArgs,
		RunE: a.onAdmin(func(ctx context.Context, rdb redis.UniversalClient) error {
			ops, err := adminOf(rdb)
			if err != nil {
				return err
			}
			libs, masters, err := ops.FunctionLibraries(ctx)
			if err != nil {
				return err
			}
			if a.json {
				type libJSON struct {
					Name    string `json:"name"`
					Current bool   `json:"current"`
					Masters int    `json:"masters"`
				}
				out := make([]libJSON, len(libs))
				for i, l := range libs {
					out[i] = libJSON{l.Name, l.Current, l.Masters}
				}
				return a.printJSON(map[string]any{"libraries": out, "masters": masters})
			}
			current, _ := ops.FunctionLibrary()
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "LIBRARY\tMASTERS\tTHIS VERSION")
			found := false
			for _, l := range libs {
				mark := ""
				if l.Current {
					mark, found = "yes", true
				}
				fmt.Fprintf(w, "%s\t%d of %d\t%s\n", l.Name, l.Masters, masters, mark)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if !found {
				_, err = fmt.Fprintf(a.stdout, "this version's library %s is not loaded: delayq admin load-functions\n", current)
			}
			return err
		}),
	}
	del := &cobra.Command{
		Use:   "delete-functions LIBRARY",
		Short: "Remove a delayq function library from Redis (every master of a cluster)",
		Long: `Remove a delayq function library (delayq_<version>, as "admin functions"
lists them) from Redis, from every master of a cluster: an old version's, once
no process of that version runs. Processes that call it fail until it is
loaded again.`,
		Args: exactArgs(1, "one library name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.onAdmin(func(ctx context.Context, rdb redis.UniversalClient) error {
				ops, err := adminOf(rdb)
				if err != nil {
					return err
				}
				if err := ops.DeleteFunctions(ctx, args[0]); err != nil {
					return err
				}
				if a.json {
					return a.printJSON(map[string]string{"deleted": args[0]})
				}
				_, err = fmt.Fprintf(a.stdout, "deleted %s\n", args[0])
				return err
			})(cmd, nil)
		},
	}
	return group("admin", "Load, list and remove the function library (as an administrator)", load, list, del)
}

// onAdmin is the RunE of an admin command: it connects and runs fn with
// the client.
func (a *app) onAdmin(fn func(context.Context, redis.UniversalClient) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		b, err := a.broker(cmd.Context())
		if err != nil {
			return err
		}
		return fn(cmd.Context(), b.Client())
	}
}

// adminOf returns the operator's side of a broker on rdb, for the commands
// that act on the server itself (the function library), not on a
// namespace.
func adminOf(rdb redis.UniversalClient) (admin.Broker, error) {
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		return nil, err
	}
	return protocol.Admin(b), nil
}

// aclCommand is "acl": the Redis ACL rules of a user limited to the
// namespace (docs/security.md).
func (a *app) aclCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "acl",
		Short: "Print the Redis ACL rules of a user limited to the namespace",
		Long: `Print the Redis ACL rules that let a user do everything delayq's workers,
producers, schedulers and this tool do in the namespace (--namespace), and
nothing else: its keys and wake-up channels (ns:*) and the commands delayq
sends. Give them to a user with ACL SETUSER (Redis 6.2 or later):

  ACL SETUSER delayq reset on >password <rules>

The rules allow EVAL and EVALSHA, which run any Lua code. With --functions
(or $` + envFunctions + `=1) they allow FCALL and FCALL_RO instead, for processes
that call the function library loaded by 'delayq admin load-functions': such a
user can run no code of its own. It does not connect to Redis.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, bad := admin.Namespace(a.namespace)
			if bad != "" {
				return usagef("invalid --namespace: %s", bad)
			}
			rules := admin.ACLRules(ns)
			if a.functions {
				rules = admin.FunctionsACLRules(ns)
			}
			if a.json {
				return a.printJSON(map[string]any{"namespace": ns, "functions": a.functions, "rules": rules})
			}
			_, err := fmt.Fprintln(a.stdout, rules)
			return err
		},
	}
}
