package broker

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/job"
)

// The operator's side that only delayq's own programs use (the CLI and the
// dashboard): internal/admin reaches it through Admin, whose argument only
// delayq's own module can name, so that none of it is part of Broker's API.

// Admin hands delayq's own programs the operator's side of the broker.
// Its argument is internal to delayq: code outside delayq's module cannot
// call it.
func (b *Broker) Admin(admin.Key) admin.Broker { return adminSide{b} }

// adminSide implements admin.Broker.
type adminSide struct{ b *Broker }

var _ admin.Broker = adminSide{}

func (a adminSide) History(ctx context.Context, queues []string, from, to time.Time) ([][]admin.Minute, error) {
	return a.b.history(ctx, queues, from, to)
}

func (a adminSide) QueueMemory(ctx context.Context, st job.QueueStats) (admin.QueueMemory, error) {
	return a.b.queueMemory(ctx, st)
}

func (a adminSide) ServerMemory(ctx context.Context) (admin.ServerMemory, error) {
	return a.b.serverMemory(ctx)
}

func (a adminSide) EvictionPolicy(ctx context.Context) (string, error) {
	return a.b.evictionPolicy(ctx)
}

func (a adminSide) Known(ctx context.Context, queue string) (bool, error) {
	return a.b.known(ctx, queue)
}

func (a adminSide) MustKnow(ctx context.Context, queue string) error {
	return a.b.mustKnow(ctx, queue)
}

func (a adminSide) Forget(ctx context.Context, queue string) error {
	return a.b.forget(ctx, queue)
}

func (a adminSide) ForgetIdle(ctx context.Context, idle time.Duration) ([]string, error) {
	return a.b.forgetIdle(ctx, idle)
}

func (a adminSide) FunctionLibrary() (name, code string) { return libraryCode() }

func (a adminSide) LoadFunctions(ctx context.Context) (string, error) {
	return loadFunctions(ctx, a.b.rdb)
}

func (a adminSide) FunctionLibraries(ctx context.Context) ([]admin.FunctionLibraryStatus, int, error) {
	return functionLibraries(ctx, a.b.rdb)
}

func (a adminSide) DeleteFunctions(ctx context.Context, name string) error {
	return deleteFunctions(ctx, a.b.rdb, name)
}
