// Package naming checks the names delayq builds its Redis keys from: job
// ids, queue and type names, flow-control keys and batch ids, and a delay.
// Every package that takes one from a caller checks it here before
// anything is written, with errors that wrap ErrInvalid (job.ErrInvalid is
// the same error) and name what was wrong.
package naming

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every error about input that delayq refuses
// before anything is written; job.ErrInvalid is this error.
var ErrInvalid = errors.New("invalid")

// Limits on names, in bytes. They keep every key inside its namespace and
// hash tag.
const (
	MaxIDLen      = 256
	MaxQueueLen   = 64
	MaxTypeLen    = 128
	MaxKeyLen     = 128
	MaxBatchIDLen = 128
)

// Why a dead record was trimmed from the dead-letter store
// (job.TrimmedRecord.Trim, the reason label of delayq.queue.dead_trimmed).
const (
	TrimCap = "cap" // the store was at its cap (broker.Options.DeadCap)
	TrimAge = "age" // the record was older than broker.Options.DeadMaxAge
)

// Defaults every package shares: the queue of a job that names none and
// the retry budget of a job type that sets none.
const (
	DefaultQueue      = "default"
	DefaultMaxRetries = 10
)

// Invalid returns an error wrapping ErrInvalid, as "job: invalid: <what>".
func Invalid(format string, args ...any) error {
	return fmt.Errorf("job: %w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ID checks a job id: 1 to MaxIDLen bytes of valid UTF-8 without control
// characters or braces (braces would break the key's hash tag).
func ID(id string) error {
	if err := checkName("id", id, MaxIDLen); err != nil {
		return err
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f || r == '{' || r == '}' {
			return Invalid("id %q contains %q; ids may not contain control characters, '{' or '}'", id, r)
		}
	}
	return nil
}

// Key checks a flow-control key (job.Key, job.KeyFrom): 1 to MaxKeyLen
// bytes of ASCII letters, digits and '.', '_', '-', ':', '/', '@', '+', '='
// (an e-mail address, a phone number, a customer id, a base64 digest). The
// scripts read a key from the head of the stored body and name Redis keys
// after it: these characters need no escape in either.
func Key(key string) error {
	return checkToken("key", key, MaxKeyLen, ":/@+=")
}

// Queue checks a queue name: 1 to MaxQueueLen bytes of ASCII letters,
// digits, '.', '_' and '-', and not "." or "..". Every such name is a URL
// path segment that stays itself (the dashboard puts queue names in its
// paths, where "." and ".." would collapse into other routes).
func Queue(q string) error {
	if q == "." || q == ".." {
		return Invalid("queue name %q is a relative path segment; a queue name needs a letter, digit, '_' or '-'", q)
	}
	return checkToken("queue name", q, MaxQueueLen, "")
}

// Type checks a job type name: 1 to MaxTypeLen bytes of ASCII letters,
// digits and '.', '_', '-', ':', '/'.
func Type(name string) error {
	return checkToken("job type", name, MaxTypeLen, ":/")
}

// BatchID checks a batch id: 1 to MaxBatchIDLen bytes of ASCII letters,
// digits and '.', '_', '-', ':'.
func BatchID(id string) error {
	return checkToken("batch id", id, MaxBatchIDLen, ":")
}

// Delay checks a delay (job.In): it must not be negative.
func Delay(d time.Duration) error {
	if d < 0 {
		return Invalid("delay %s is negative", d)
	}
	return nil
}

func checkName(what, s string, maxLen int) error {
	switch {
	case s == "":
		return Invalid("%s must not be empty", what)
	case len(s) > maxLen:
		return Invalid("%s is %d bytes long, the limit is %d", what, len(s), maxLen)
	case !utf8.ValidString(s):
		return Invalid("%s %q is not valid UTF-8", what, s)
	}
	return nil
}

func checkToken(what, s string, maxLen int, extra string) error {
	if err := checkName(what, s, maxLen); err != nil {
		return err
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		case strings.ContainsRune(extra, r):
		default:
			return Invalid("%s %q contains %q; allowed are letters, digits and '._-%s'", what, s, r, extra)
		}
	}
	return nil
}

// uniqueEncoding writes the digest of a [UniqueID] in lower-case base 32.
var uniqueEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// UniqueID is the id of a Unique job that names none: "u:" and 32
// characters of the SHA-256 of the type name and the encoded arguments, so
// the same type and argument bytes give the same id (docs/scheduling.md).
func UniqueID(typ string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	h.Write(payload)
	return "u:" + uniqueEncoding.EncodeToString(h.Sum(nil)[:20])
}

// Expiry checks an expiry against the ready time of its job: at when it is
// set, else now + delay, or now + debounce (the end of the window) for a
// debounced job. An expiry that is not after the ready time would never let
// the job run. A zero expiry is no expiry.
func Expiry(expireAt, at time.Time, delay, debounce time.Duration, now time.Time) error {
	if expireAt.IsZero() {
		return nil
	}
	ready := at
	switch {
	case debounce > 0:
		ready = now.Add(debounce)
	case ready.IsZero():
		ready = now.Add(delay)
	}
	if !expireAt.After(ready) {
		return Invalid("expiry %s is not after the ready time %s", expireAt.Format(time.RFC3339Nano), ready.Format(time.RFC3339Nano))
	}
	return nil
}
