package broker

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/job"
)

// The unexported names that the package's external tests (package
// broker_test) use.
const (
	DefaultResendWindow = defaultResendWindow
	HistoryRetention    = historyRetention
	MaxShards           = maxShards
	MinRedisVersion     = minRedisVersion
	TrimWarnEvery       = trimWarnEvery
	NotChecked          = notChecked
	CheckedByVersion    = checkedByVersion
	CheckedByProbe      = checkedByProbe
	MaxHeldKeys         = maxHeldKeys
	MaxPageLimit        = maxPageLimit
)

type (
	ServerCheck = serverCheck
	CheckMethod = checkMethod
)

// ServerChecks returns what New learned of the servers.
func (b *Broker) ServerChecks() []ServerCheck { return b.serverChecks() }

// The operator's side (internal/admin), under the names the external
// tests use.
type (
	Minute                = admin.Minute
	QueueMemory           = admin.QueueMemory
	ServerMemory          = admin.ServerMemory
	FunctionLibraryStatus = admin.FunctionLibraryStatus
)

const FunctionLibraryPrefix = admin.FunctionLibraryPrefix

var (
	ErrConfigUnavailable = admin.ErrConfigUnavailable
	ErrMemoryNotReadable = admin.ErrMemoryNotReadable
	ErrUnknownQueue      = admin.ErrUnknownQueue
	ErrQueueNotEmpty     = admin.ErrQueueNotEmpty
	EvictionSafe         = admin.EvictionSafe
	FunctionLibrary      = libraryCode
	LoadFunctions        = loadFunctions
	FunctionLibraries    = functionLibraries
	DeleteFunctions      = deleteFunctions
)

func (b *Broker) History(ctx context.Context, queues []string, from, to time.Time) ([][]Minute, error) {
	return b.history(ctx, queues, from, to)
}

func (b *Broker) QueueMemory(ctx context.Context, st job.QueueStats) (QueueMemory, error) {
	return b.queueMemory(ctx, st)
}

func (b *Broker) ServerMemory(ctx context.Context) (ServerMemory, error) { return b.serverMemory(ctx) }

func (b *Broker) EvictionPolicy(ctx context.Context) (string, error) { return b.evictionPolicy(ctx) }

func (b *Broker) Known(ctx context.Context, queue string) (bool, error) { return b.known(ctx, queue) }

func (b *Broker) MustKnow(ctx context.Context, queue string) error { return b.mustKnow(ctx, queue) }

func (b *Broker) Forget(ctx context.Context, queue string) error { return b.forget(ctx, queue) }

func (b *Broker) ForgetIdle(ctx context.Context, idle time.Duration) ([]string, error) {
	return b.forgetIdle(ctx, idle)
}

func (b *Broker) ScheduledPage(ctx context.Context, queue, cursor string, limit int) (JobPage, error) {
	return b.Page(ctx, queue, job.StateScheduled, cursor, limit)
}

func (b *Broker) ProcessingPage(ctx context.Context, queue, cursor string, limit int) (JobPage, error) {
	return b.Page(ctx, queue, job.StateProcessing, cursor, limit)
}
