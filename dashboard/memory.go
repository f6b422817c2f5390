package dashboard

import (
	"context"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// serverMemory is what INFO memory says of the server (the sum over the
// masters of a cluster), or why it cannot be read.
type serverMemory struct {
	admin.ServerMemory
	Err string // "" when read
}

// readServerMemory reads the server's memory (admin.Broker.ServerMemory). A
// server that refuses it (an ACL user without INFO, a managed Redis that
// hides it; the broker then asks no more) gives Err, not an error: the
// page shows "not available".
func (d *Dashboard) readServerMemory(ctx context.Context) serverMemory {
	m, err := protocol.Admin(d.b).ServerMemory(ctx)
	if err != nil {
		return serverMemory{Err: notAvailable(err)}
	}
	return serverMemory{ServerMemory: m}
}

// notAvailable says why a read of memory failed, in one line.
func notAvailable(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimPrefix(s, admin.ErrMemoryNotReadable.Error()+": ")
	if strings.Contains(s, "NOPERM") {
		return "not available: this Redis user may not run it (" + firstLine(s, 120) + ")"
	}
	return "not available: " + firstLine(s, 160)
}

// queueMemory is what the keys of one queue take in Redis, estimated by
// MEMORY USAGE with a bounded sample, or why it cannot be read.
type queueMemory struct {
	admin.QueueMemory
	Err string // "" when read
}

// readQueueMemory estimates the memory of the queue s describes
// (admin.Broker.QueueMemory: a few dozen sampled MEMORY USAGE calls whatever the
// queue holds).
func (d *Dashboard) readQueueMemory(ctx context.Context, s job.QueueStats) queueMemory {
	m, err := protocol.Admin(d.b).QueueMemory(ctx, s.Queue)
	if err != nil {
		return queueMemory{Err: notAvailable(err)}
	}
	return queueMemory{QueueMemory: m}
}

// formatBytes is n bytes in binary units: 512 B, 1.5 KiB, 12.3 MiB, 2.0 GiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTP"[exp]) + "iB"
}
