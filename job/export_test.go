package job

// ValidateHeader is validateHeader, for the fuzz tests of package job_test.
var ValidateHeader = validateHeader
