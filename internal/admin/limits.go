// Package admin is the operator's side of the broker that only delayq's
// own programs use: the limits and defaults the delayq command checks its
// flags against, the Redis ACL rules of a namespace's user, and ([Broker],
// which internal/protocol's Admin returns) what the command and the
// dashboard read and do beyond the producer's API of *broker.Broker.
//
// It is internal so that it can change with the command and the dashboard
// without breaking users; package broker implements it.
package admin

import (
	"time"

	"github.com/delayq/delayq/internal/keyspace"
)

// Defaults of broker.Options (its fields' comments state them).
const (
	DefaultNamespace  = keyspace.DefaultNamespace
	DefaultDeadCap    = 10_000
	DefaultDeadMaxAge = 30 * 24 * time.Hour
)

// DefaultBatchKeep is how long a batch's record is kept after its
// callbacks fired when broker.BatchSpec.Keep is 0.
const DefaultBatchKeep = 7 * 24 * time.Hour

// Limits of the broker's calls; a value outside them is refused with an
// error wrapping job.ErrInvalid that names the limit.
const (
	MaxPageLimit   = 1000      // jobs of one Page call
	MaxBatchesPage = 1000      // batches of one Batches call
	MaxHeldKeys    = 1000      // keys of one HeldKeys call
	MinForgetIdle  = time.Hour // the shortest idle time ForgetIdle takes
)
