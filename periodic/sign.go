package periodic

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/job"
)

// headerSignature is the header with which a scheduler signs its tick's
// job: an HMAC of the job's id and queue under the namespace's periodic
// key (keyspace ns:{:periodic}:secret), which only schedulers write.
// [Outcomes] records the outcome of a job only when its signature holds,
// so a job that merely carries headerSchedule (anyone who can enqueue can
// set headers) cannot change a schedule's last outcome.
const headerSignature = "delayq-periodic-sig"

// secretBytes is the size of the periodic key, before hex encoding.
const secretBytes = 32

// sign returns the signature of the tick job id in queue under secret.
func sign(secret []byte, id, queue string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("delayq-periodic\x00"))
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write([]byte(queue))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// loadSecret returns the namespace's periodic key, making it first when
// there is none (SET NX GET: of two schedulers that make one at once, one
// keeps its own and the other reads it).
func loadSecret(ctx context.Context, rdb redis.UniversalClient, key string) ([]byte, error) {
	raw := make([]byte, secretBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	mine := hex.EncodeToString(raw)
	old, err := rdb.SetArgs(ctx, key, mine, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return []byte(mine), nil
	case err != nil:
		return nil, fmt.Errorf("reading the periodic key: %w", err)
	case old == "":
		return nil, errors.New("the periodic key is empty")
	}
	return []byte(old), nil
}

// How often a verifier reads the key again: once a minute when a
// signature does not hold (the key may have been made anew), once a
// second while there is none (no scheduler ran yet).
const (
	secretRefresh = time.Minute
	secretRetry   = time.Second
)

// verifier checks tick jobs' signatures for Outcomes.
type verifier struct {
	rdb redis.UniversalClient
	key string

	mu     sync.Mutex
	secret []byte
	readAt time.Time
}

// tick returns the schedule and tick of m when m is the job a scheduler
// enqueued for that tick: its id is the tick's (tickID of its headers'
// name and tick), or for a run-now job [runID] of its headers' name and
// request, and its signature holds for its id and queue.
func (v *verifier) tick(ctx context.Context, m *job.Message) (string, time.Time, bool) {
	name, sig := m.Headers[headerSchedule], m.Headers[headerSignature]
	at, err := time.Parse(tickLayout, m.Headers[headerTick])
	want := tickID(name, at)
	if req := m.Headers[headerRun]; req != "" {
		want = runID(name, req) // a run-now job: at is when it was requested
	}
	if err != nil || sig == "" || m.ID != want {
		return "", time.Time{}, false
	}
	for _, again := range []bool{false, true} {
		secret := v.load(ctx, again)
		if secret != nil && hmac.Equal([]byte(sig), []byte(sign(secret, m.ID, m.Queue))) {
			return name, at, true
		}
	}
	return "", time.Time{}, false
}

// load returns the key: read when not yet known, or when again and it
// was last read more than secretRefresh ago. Only schedulers make it: nil
// when there is none, or it cannot be read (read again after secretRetry).
func (v *verifier) load(ctx context.Context, again bool) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	since := time.Since(v.readAt)
	switch {
	case v.readAt.IsZero():
	case v.secret == nil && since < secretRetry:
		return nil
	case v.secret != nil && (!again || since < secretRefresh):
		return v.secret
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeTimeout)
	defer cancel()
	v.readAt = time.Now()
	if s, err := v.rdb.Get(ctx, v.key).Result(); err == nil && s != "" {
		v.secret = []byte(s)
	}
	return v.secret
}
