package outbox

import (
	"testing"

	"github.com/delayq/delayq/internal/docnames"
)

// TestNamesInDocs checks the table of docs/outbox.md's "Names" section
// against the names the package's constants give: every metric (metric*),
// label (label*), outcome (outcome*) and the scope (scopeName). A name
// added, renamed or dropped on one side fails it.
func TestNamesInDocs(t *testing.T) {
	docnames.Check(t, []docnames.Kind{
		{Prefix: "scopeName", Kind: "scope"},
		{Prefix: "metric", Kind: "metric"},
		{Prefix: "label", Kind: "label"},
		{Prefix: "outcome", Kind: "outcome"},
	}, "../docs/outbox.md", "## Names", 14)
}
