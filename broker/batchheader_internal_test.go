package broker

import (
	"os"
	"regexp"
	"testing"
)

// TestBatchHeaderInDoc: docs/batches.md names the header a batch's
// callback jobs carry, which users read to learn their batch; it must be
// batchHeader, so that renaming either side fails here.
func TestBatchHeaderInDoc(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/batches.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("the header `([^`]+)` set to\\s+the batch id").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/batches.md no longer names the callbacks' header (\"the header `...` set to the batch id\")")
	}
	if got := string(m[1]); got != batchHeader {
		t.Errorf("docs/batches.md names the callbacks' header %q; the code sets %q", got, batchHeader)
	}
}
