package cli

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/delayq/delayq/dashboard"
)

// Environment variables that hold the dashboard's credentials: kept out of
// flags so that they do not show in the process list.
const (
	envDashboardToken    = "DELAYQ_DASHBOARD_TOKEN"
	envDashboardUser     = "DELAYQ_DASHBOARD_USER"
	envDashboardPassword = "DELAYQ_DASHBOARD_PASSWORD"
)

func (a *app) dashboardCommand() *cobra.Command {
	var (
		addr, prefix          string
		readOnly, allowRemote bool
		refresh               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard: queues, scheduled jobs, dead letters",
		Long: `Serve the web dashboard on --addr until interrupted: every queue's counts
with charts of the last hour, scheduled and processing jobs, job details,
the dead-letter store, and actions (cancel, reschedule, redrive, delete,
purge) unless --read-only.

It listens on loopback unless told otherwise. Credentials come from the
environment: $` + envDashboardToken + ` admits "Authorization: Bearer <token>",
$` + envDashboardUser + ` with $` + envDashboardPassword + ` admit basic auth.
A non-loopback --addr needs --allow-remote and credentials.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if refresh < 0 {
				return usagef("invalid --refresh %s: must not be negative", refresh)
			}
			if refresh == 0 {
				refresh = -1 // the flag's 0 means off; the option's 0 means the default
			}
			opts := dashboard.Options{
				Prefix:            prefix,
				ReadOnly:          readOnly,
				BearerToken:       a.getenv(envDashboardToken),
				BasicAuthUser:     a.getenv(envDashboardUser),
				BasicAuthPassword: a.getenv(envDashboardPassword),
				RefreshInterval:   refresh,
			}
			b, err := a.broker(cmd.Context())
			if err != nil {
				return err
			}
			d, err := dashboard.New(b, opts)
			if err != nil {
				return &usageError{err}
			}
			ready := func(l net.Addr) {
				url := "http://" + l.String() + prefix + "/"
				if a.json {
					_ = a.printJSON(map[string]string{"url": url, "namespace": b.Namespace()})
					return
				}
				fmt.Fprintf(a.stdout, "delayq dashboard on %s (namespace %s); Ctrl-C stops it\n", url, b.Namespace())
			}
			err = dashboard.Serve(cmd.Context(), addr, d, dashboard.ServeOptions{AllowRemote: allowRemote, Ready: ready})
			if errors.Is(err, dashboard.ErrNotLoopback) || errors.Is(err, dashboard.ErrWeakCredentials) {
				return &usageError{err}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", dashboard.DefaultAddr, "address to listen on")
	f.StringVar(&prefix, "prefix", "", `path prefix of every page, e.g. "/delayq" behind a proxy`)
	f.BoolVar(&readOnly, "read-only", false, "hide and refuse every action")
	f.BoolVar(&allowRemote, "allow-remote", false, "allow a non-loopback --addr (needs credentials)")
	f.DurationVar(&refresh, "refresh", dashboard.DefaultRefreshInterval, "auto-refresh period of the overview and queue pages; 0 turns it off")
	return cmd
}
