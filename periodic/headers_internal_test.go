package periodic

import (
	"os"
	"strings"
	"testing"
)

// docs/periodic.md names every header a scheduler sets on a tick's job (a
// handler reads them by these names): the constants and the doc must agree.
func TestHeadersInDocs(t *testing.T) {
	raw, err := os.ReadFile("../docs/periodic.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, h := range []string{headerSchedule, headerTick, headerSignature, headerRun} {
		if !strings.Contains(doc, "`"+h+"`") {
			t.Errorf("docs/periodic.md does not name the header %q", h)
		}
	}
	if !strings.Contains(doc, "these four are every header a scheduler sets") {
		t.Error("docs/periodic.md does not say that its four headers are all a scheduler sets")
	}
}
