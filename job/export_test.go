package job

// ValidateHeader is validateHeader, for the fuzz tests of package job_test.
var ValidateHeader = validateHeader

// The limits the package keeps unexported, for the tests of package job_test.
const (
	MaxResultSize      = maxResultSize
	MaxProgressMessage = maxProgressMessage
	MaxErrorLen        = maxErrorLen
	MaxNext            = maxNext
)
