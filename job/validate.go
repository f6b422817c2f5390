package job

import (
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/naming"
)

// ErrInvalid is wrapped by every error about input that delayq refuses before
// anything is written: a bad id, queue name, type name, delay or option.
var ErrInvalid = naming.ErrInvalid

func invalid(format string, args ...any) error { return naming.Invalid(format, args...) }

// validateHeader checks a header: a non-empty key, and key and value of
// valid UTF-8, so that storage gives them back unchanged.
func validateHeader(key, value string) error {
	switch {
	case key == "":
		return invalid("header key must not be empty")
	case !utf8.ValidString(key):
		return invalid("header key %q is not valid UTF-8", key)
	case !utf8.ValidString(value):
		return invalid("value of header %q is not valid UTF-8", key)
	}
	return nil
}

// validateExpiry checks the expiry of env against its ready time (At, or
// now + Delay, or now + Debounce for a debounced job): an expiry that is not
// after it would never let the job run.
func validateExpiry(env *Envelope, now time.Time) error {
	if env.ExpireAt.IsZero() && env.DropExpired {
		return invalid("DropExpired of job %q without an expiry", env.ID)
	}
	return naming.Expiry(env.ExpireAt, env.At, env.Delay, env.Debounce, now)
}

// validateUnique checks the uniqueness settings of env.
func validateUnique(env *Envelope) error {
	switch {
	case env.UniqueFor < 0:
		return invalid("uniqueness ttl %s is negative", env.UniqueFor)
	case !env.Unique && (env.UniqueFor != 0 || env.UniqueDead):
		return invalid("UniqueFor or UniqueDead of job %q without Unique", env.ID)
	}
	return nil
}

// validateDebounce checks the debounce settings of env ([Debounce]): a
// window that is not negative, and, when it is set, an id (the key), and
// none of the settings a debounced job cannot have.
func validateDebounce(env *Envelope) error {
	if env.Debounce == 0 {
		return nil
	}
	switch {
	case env.Debounce < 0:
		return invalid("debounce window %s of job %q is negative", env.Debounce, env.ID)
	case env.ID == "":
		return invalid("debounced job of type %q has no id: its id is its debounce key", env.Type)
	case env.Unique:
		return invalid("job %q has Unique and Debounce: Unique refuses a later enqueue that Debounce would take in; choose one", env.ID)
	case env.Replace:
		return invalid("job %q has Replace and Debounce: Debounce replaces the pending job already; give Debounce alone", env.ID)
	case env.Delay != 0 || !env.At.IsZero():
		return invalid("job %q has a Delay or At and Debounce: a debounced job is ready at the end of its window", env.ID)
	case env.Batch != "":
		return invalid("job %q is a member of batch %q and has Debounce: a member is a new job", env.ID, env.Batch)
	}
	return nil
}
