package worker

import (
	"context"
	"errors"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/protocol"
)

// evictionCheckTimeout bounds the check at start.
const evictionCheckTimeout = 5 * time.Second

// checkEviction logs a warning when the server's eviction policy could drop
// jobs under memory pressure. Servers that refuse CONFIG GET are noted at
// info level; the worker runs either way.
func (w *Worker) checkEviction(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, evictionCheckTimeout)
	defer cancel()
	policy, err := protocol.Admin(w.cfg.Broker).EvictionPolicy(ctx)
	switch {
	case errors.Is(err, admin.ErrConfigUnavailable):
		w.log.Info().Err(err).Msg("cannot read the Redis maxmemory-policy; make sure it is noeviction so that jobs are never evicted")
	case err != nil:
		w.log.Debug().Err(err).Msg("cannot read the Redis maxmemory-policy")
	case !admin.EvictionSafe(policy):
		w.log.Warn().Str("maxmemory_policy", policy).Msg("Redis may evict keys under memory pressure and so drop jobs; set maxmemory-policy to noeviction")
	default:
		w.log.Debug().Str("maxmemory_policy", policy).Msg("Redis eviction policy keeps jobs")
	}
}
