package middleware

import (
	"testing"

	"github.com/delayq/delayq/internal/docnames"
)

// TestNamesInDocs checks the table of docs/observability.md's "Names"
// section against the names the package's constants give: every metric
// (metric*), label (label*), span attribute (attr*), the event
// (eventDeadLettered), the scope (scopeName) and the system (systemName).
// A name added, renamed or dropped on one side fails it.
func TestNamesInDocs(t *testing.T) {
	docnames.Check(t, []docnames.Kind{
		{Prefix: "scopeName", Kind: "scope"},
		{Prefix: "systemName", Kind: "system"},
		{Prefix: "eventDeadLettered", Kind: "event"},
		{Prefix: "metric", Kind: "metric"},
		{Prefix: "label", Kind: "label"},
		{Prefix: "attr", Kind: "attribute"},
	}, "../docs/observability.md", "## Names", 30)
}
