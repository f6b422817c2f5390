// Command delayq inspects and operates delayq queues: stats, scheduled and
// processing jobs, enqueueing, and the dead-letter store. Run "delayq --help".
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/delayq/delayq/cmd/delayq/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
