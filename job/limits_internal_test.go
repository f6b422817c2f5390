package job

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/naming"
)

// TestDocLimits holds the package doc's list of defaults and limits to the
// constants: a changed limit fails here until the doc says it.
func TestDocLimits(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", "")), " ")
	kib := func(n int) string {
		if n%(1<<20) == 0 {
			return strconv.Itoa(n>>20) + " MiB"
		}
		return strconv.Itoa(n>>10) + " KiB"
	}
	for _, want := range []string{
		`goes to the queue "` + naming.DefaultQueue + `"`,
		"gives its jobs " + strconv.Itoa(naming.DefaultMaxRetries) + " retries",
		"a job id ([ID], the key of [Debounce]): " + strconv.Itoa(naming.MaxIDLen) + " bytes",
		"a queue name ([Queue]): " + strconv.Itoa(naming.MaxQueueLen) + " bytes",
		"a job type name ([New]): " + strconv.Itoa(naming.MaxTypeLen) + " bytes",
		"a flow-control key ([Key], [KeyFrom]): " + strconv.Itoa(naming.MaxKeyLen) + " bytes",
		"a batch id (broker.Broker.CreateBatch): " + strconv.Itoa(naming.MaxBatchIDLen) + " bytes",
		"next jobs ([Then], and as many more by [Next] from a handler): " + strconv.Itoa(naming.MaxNext),
		"a result ([SetResult]): " + kib(maxResultSize),
		"a progress message ([ReportProgress]): " + strconv.Itoa(maxProgressMessage) + " bytes",
		"is cut to " + kib(naming.MaxErrorLen),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the package doc does not say %q", want)
		}
	}
}
