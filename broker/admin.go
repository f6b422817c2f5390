package broker

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/job"
)

// The operator's side that only delayq's own programs use (the CLI and the
// dashboard): internal/admin reaches it through the functions registered
// below, so that none of it is part of Broker's API.

func init() {
	admin.Register(admin.Funcs{
		For: func(b any) (admin.Broker, bool) {
			bb, ok := b.(*Broker)
			if !ok || bb == nil {
				return nil, false
			}
			return adminSide{bb}, true
		},
		FunctionLibrary:   libraryCode,
		LoadFunctions:     loadFunctions,
		FunctionLibraries: functionLibraries,
		DeleteFunctions:   deleteFunctions,
	})
}

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
