package job

import (
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/naming"
)

// Prepare fills in what every enqueuer fills in when it is empty (Queue:
// "default"; ID: [NewID], or a digest of type and payload for a Unique job; CreatedAt:
// now) and checks env's fields as broker.Enqueue does (which calls it):
// queue, id, type and header names, the delay, the uniqueness and debounce settings, the
// expiry against the ready time, the retry budget, the timeout, the
// retention and the backoff. Errors wrap [ErrInvalid] and
// name the field. A size cap on the payload is the caller's (the broker's
// MaxPayloadBytes). The outbox and the test kit's recording enqueuer call
// it, so that they refuse what the broker refuses.
func Prepare(env *Envelope, now time.Time) error {
	if env == nil {
		return invalid("nil envelope")
	}
	if env.Queue == "" {
		env.Queue = naming.DefaultQueue
	}
	if err := naming.Queue(env.Queue); err != nil {
		return err
	}
	if err := validateUnique(env); err != nil {
		return err
	}
	if err := validateDebounce(env); err != nil {
		return err
	}
	if env.ID == "" {
		if env.Unique {
			env.ID = naming.UniqueID(env.Type, env.Payload)
		} else {
			env.ID = NewID()
		}
	}
	if err := naming.ID(env.ID); err != nil {
		return err
	}
	if err := naming.Type(env.Type); err != nil {
		return err
	}
	if err := naming.Delay(env.Delay); err != nil {
		return err
	}
	if err := validateExpiry(env, now); err != nil {
		return err
	}
	if env.MaxRetries < 0 {
		return invalid("max retries %d of job %q is negative", env.MaxRetries, env.ID)
	}
	if env.Timeout < 0 {
		return invalid("timeout %s of job %q is negative", env.Timeout, env.ID)
	}
	if env.Retain < 0 {
		return invalid("retention %s of job %q is negative", env.Retain, env.ID)
	}
	if env.Backoff != nil {
		if err := env.Backoff.validate(); err != nil {
			return err
		}
	}
	if env.Batch != "" {
		if err := naming.BatchID(env.Batch); err != nil {
			return err
		}
	}
	for k, v := range env.Headers {
		if err := validateHeader(k, v); err != nil {
			return err
		}
	}
	if len(env.Next) > 0 {
		if err := validateChain(env.Next, now); err != nil {
			return fmt.Errorf("job %q: %w", env.ID, err)
		}
	}
	if env.CreatedAt.IsZero() {
		env.CreatedAt = now
	}
	return nil
}
