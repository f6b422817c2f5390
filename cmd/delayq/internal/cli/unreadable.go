package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/delayq/delayq/broker"
)

// unreadableJSON is a queue that a namespace-wide reader (stats, queues
// ls, dead ls) left out because it could not be read, and why.
type unreadableJSON struct {
	Queue string `json:"queue"`
	Error string `json:"error"`
}

// leftOut splits the error of a namespace-wide reader: the queues it could
// not read (a *broker.QueueErrors, or the queues a dead-letter page
// skipped), which the command shows as left out rather than failing, from
// an error that fails it.
func leftOut(err error) (map[string]error, error) {
	var qe *broker.QueueErrors
	if errors.As(err, &qe) {
		return qe.Errs, nil
	}
	return nil, err
}

// unreadableList is bad as JSON, by queue name; nil when bad is empty.
func unreadableList(bad map[string]error) []unreadableJSON {
	var out []unreadableJSON
	for _, q := range slices.Sorted(maps.Keys(bad)) {
		out = append(out, unreadableJSON{Queue: q, Error: bad[q].Error()})
	}
	return out
}

// warnLeftOut writes one line per queue left out to stderr: what was shown
// is every queue but those.
func (a *app) warnLeftOut(bad map[string]error) {
	for _, q := range slices.Sorted(maps.Keys(bad)) {
		fmt.Fprintf(a.stderr, "delayq: warning: queue %s left out, it cannot be read: %s\n", termSafe(q, false), termSafe(oneLine(bad[q].Error()), false))
	}
}
