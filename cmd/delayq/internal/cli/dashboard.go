package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/dashserve"
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
		addr, prefix, tlsCert, tlsKey string
		readOnly, allowRemote         bool
		refresh                       time.Duration
		allowedHosts                  []string
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard: queues, scheduled jobs, dead letters",
		Long: `Serve the web dashboard on --addr until interrupted: every queue's counts
with charts of the last hour, scheduled and processing jobs, job details,
the dead-letter store, and actions (cancel, reschedule, redrive, delete,
purge) unless --read-only.

It listens on loopback unless told otherwise, and answers only to requests
for a loopback host name (localhost, 127.0.0.1, ::1), its own address and
the names given with --allowed-host: a web page on a domain pointed at
127.0.0.1 gets 421 and cannot use the dashboard. Credentials come from the
environment: $` + envDashboardToken + ` admits "Authorization: Bearer <token>",
$` + envDashboardUser + ` with $` + envDashboardPassword + ` admit basic auth.
A non-loopback --addr needs --allow-remote and credentials of at least 16
bytes; serve it with --tls-cert and --tls-key, or behind a TLS proxy, so that
they do not cross the network in clear text. Wrong credentials are logged
on stderr, at most one line a second.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if refresh < 0 {
				return usagef("invalid --refresh %s: must not be negative", refresh)
			}
			if refresh == 0 {
				refresh = -1 // the flag's 0 means off; the option's 0 means the default
			}
			if (tlsCert == "") != (tlsKey == "") {
				return usagef("give --tls-cert and --tls-key together")
			}
			var tlsConfig *tls.Config
			if tlsCert != "" {
				cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usagef("invalid --tls-cert/--tls-key: %v", err)
				}
				tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
			}
			logger := a.logger()
			opts := dashboard.Options{
				Prefix:            prefix,
				ReadOnly:          readOnly,
				BearerToken:       a.getenv(envDashboardToken),
				BasicAuthUser:     a.getenv(envDashboardUser),
				BasicAuthPassword: a.getenv(envDashboardPassword),
				RefreshInterval:   refresh,
				AllowedHosts:      allowedHosts,
				Logger:            &logger,
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
				scheme := "http"
				if tlsConfig != nil {
					scheme = "https"
				}
				url := scheme + "://" + l.String() + prefix + "/"
				if tcp, ok := l.(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && tlsConfig == nil {
					fmt.Fprintln(a.stderr, "delayq: warning: serving other machines over plain HTTP: credentials cross the network in clear text; use --tls-cert and --tls-key, or a TLS proxy")
				}
				if a.json {
					_ = a.printJSON(map[string]string{"url": url, "namespace": b.Namespace()})
					return
				}
				fmt.Fprintf(a.stdout, "delayq dashboard on %s (namespace %s); Ctrl-C stops it\n", url, b.Namespace())
			}
			err = dashserve.Serve(cmd.Context(), addr, d, dashserve.Options{AllowRemote: allowRemote, Ready: ready, TLSConfig: tlsConfig,
				BearerToken: opts.BearerToken, BasicAuthUser: opts.BasicAuthUser, BasicAuthPassword: opts.BasicAuthPassword})
			if errors.Is(err, dashserve.ErrNotLoopback) || errors.Is(err, dashserve.ErrWeakCredentials) {
				return &usageError{err}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", dashserve.DefaultAddr, "address to listen on")
	f.StringVar(&prefix, "prefix", "", `path prefix of every page, e.g. "/delayq" behind a proxy`)
	f.BoolVar(&readOnly, "read-only", false, "hide and refuse every action")
	f.BoolVar(&allowRemote, "allow-remote", false, "allow a non-loopback --addr (needs credentials)")
	f.DurationVar(&refresh, "refresh", 5*time.Second, "auto-refresh period of the overview and queue pages; 0 turns it off")
	f.StringArrayVar(&allowedHosts, "allowed-host", nil, `also answer to this Host: a name, or name:port, e.g. a proxy's public name (repeatable)`)
	f.StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file; needs --tls-key")
	f.StringVar(&tlsKey, "tls-key", "", "the PEM private key file of --tls-cert")
	return cmd
}

// logger writes the dashboard's log lines to stderr: JSON with --json, else
// one line of text each.
func (a *app) logger() zerolog.Logger {
	if a.json {
		return zerolog.New(a.stderr).With().Timestamp().Logger()
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: a.stderr, NoColor: true, TimeFormat: time.RFC3339}).With().Timestamp().Logger()
}
