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
		"next jobs ([Then], and as many more by [Next] from a handler): " + strconv.Itoa(maxNext),
		"a result ([SetResult]): " + kib(maxResultSize),
		"a progress message ([ReportProgress]): " + strconv.Itoa(maxProgressMessage) + " bytes",
		"is cut to " + kib(maxErrorLen),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the package doc does not say %q", want)
		}
	}
}

// TestTrimReasonsDocumented holds the names of the reasons a dead record is
// trimmed for (TrimmedRecord.Trim, the reason label of the dead_trimmed
// metric) to their docs: the field's doc and docs/observability.md.
func TestTrimReasonsDocumented(t *testing.T) {
	src, err := os.ReadFile("inspect.go")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	field := strings.Join(strings.Fields(strings.ReplaceAll(string(src), "//", "")), " ")
	for _, want := range []string{
		`Trim says why: "` + naming.TrimCap + `", the store was at its cap`,
		`"` + naming.TrimAge + `", the record was older than`,
	} {
		if !strings.Contains(field, want) {
			t.Errorf("TrimmedRecord.Trim's doc does not say %q", want)
		}
	}
	if want := "reason (`" + naming.TrimCap + "`, `" + naming.TrimAge + "`)"; !strings.Contains(string(obs), want) {
		t.Errorf("docs/observability.md does not list the reasons as %q", want)
	}
}
