package broker

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/admin"
)

// The operator's side that only delayq's own programs use (the CLI and the
// dashboard): they reach it with protocol.Admin(b), through Seams, whose
// argument only delayq's own module can name, so that none of it is part
// of Broker's API.

// Admin returns the broker's operator's side (protocol.Admin calls it).
func (s seams) Admin() admin.Broker { return adminSide{s.b} }

// adminSide implements admin.Broker.
type adminSide struct{ b *Broker }

var _ admin.Broker = adminSide{}

func (a adminSide) History(ctx context.Context, queues []string, from, to time.Time) ([][]admin.Minute, error) {
	return a.b.history(ctx, queues, from, to)
}

func (a adminSide) Queues(ctx context.Context) ([]string, error) { return a.b.queueNames(ctx) }

func (a adminSide) Shards(ctx context.Context, queue string) ([]admin.Shard, error) {
	return a.b.shards(ctx, queue)
}

func (a adminSide) QueueMemory(ctx context.Context, queue string) (admin.QueueMemory, error) {
	sts, errs, err := a.b.statsOf(ctx, []string{queue})
	if err != nil {
		return admin.QueueMemory{}, err
	}
	if errs[0] != nil {
		return admin.QueueMemory{}, errs[0]
	}
	return a.b.queueMemory(ctx, sts[0])
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
