package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/job"
)

// RescheduleAfter moves a scheduled job to ready delay after the server's
// now (0 means now). Errors as for Cancel; a negative delay gives an error
// wrapping job.ErrInvalid, and nothing changes.
func (b *Broker) RescheduleAfter(ctx context.Context, queue, id string, delay time.Duration) (time.Time, error) {
	if err := validQueueID(queue, id); err != nil {
		return time.Time{}, err
	}
	if delay < 0 {
		return time.Time{}, fmt.Errorf("broker: %w: delay %s is negative", job.ErrInvalid, delay)
	}
	k := b.keys(queue)
	res, err := b.run(ctx, rescheduleScript, []string{k.scheduled, k.processing}, id, 0, durMS(delay), k.wake)
	if err != nil {
		return time.Time{}, queueErr(queue, err)
	}
	if err := stateResult(queue, id, res); err != nil {
		return time.Time{}, err
	}
	ready, _ := res.(int64)
	return fromMS(ready), nil
}
