package broker

// The unexported names that the package's external tests (package
// broker_test) use.
const (
	DefaultResendWindow = defaultResendWindow
	HistoryRetention    = historyRetention
	MaxShards           = maxShards
	MinRedisVersion     = minRedisVersion
	TrimWarnEvery       = trimWarnEvery
	NotChecked          = notChecked
	CheckedByVersion    = checkedByVersion
	CheckedByProbe      = checkedByProbe
	MaxHeldKeys         = maxHeldKeys
	MaxPageLimit        = maxPageLimit
)

type (
	ServerCheck = serverCheck
	CheckMethod = checkMethod
)

// ServerChecks returns what New learned of the servers.
func (b *Broker) ServerChecks() []ServerCheck { return b.serverChecks() }
