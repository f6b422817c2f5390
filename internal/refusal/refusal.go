// Package refusal marks a context whose enqueues expect some refusals: the
// periodic scheduler's ticks (every replica enqueues every tick, all but
// one as duplicates) and the worker's batch callbacks. The producer
// middleware (middleware.EnqueueTracing) gives an envelope refused so
// delayq.enqueue.refused with the reason instead of an error status.
package refusal

import "context"

type key struct{}

// Expect returns ctx marked so that an envelope refused with an error for
// which expected reports true is taken as expected.
func Expect(ctx context.Context, expected func(error) bool) context.Context {
	return context.WithValue(ctx, key{}, expected)
}

// Expected returns what ctx's Expect was given, or nil.
func Expected(ctx context.Context) func(error) bool {
	f, _ := ctx.Value(key{}).(func(error) bool)
	return f
}
