package redistest

import (
	"fmt"
	"os"
	"os/exec"
)

// ServerEnv names the environment variable that selects the server binary
// every server of this package runs (the shared server, [Start],
// [StartTLS], the nodes of [StartCluster] and [StartSentinel]): the path
// of a redis-server-compatible binary, e.g. /usr/bin/valkey-server, or a
// name looked up on PATH. Unset or empty means redis-server from PATH. The
// binary must take redis-server's command-line options (--port, --save,
// --dir, ...) and answer the same protocol; a cluster is still joined with
// redis-cli from PATH.
//
// A binary named here that cannot be run fails the test instead of falling
// back to miniredis, even without DELAYQ_REQUIRE_REDIS=1: the suite was
// asked to run against that server.
const ServerEnv = "DELAYQ_REDIS_SERVER"

// ServerBinary returns the server binary to run: $DELAYQ_REDIS_SERVER
// ([ServerEnv]) if set, else redis-server from PATH. The error names the
// variable or PATH, whichever was looked at.
func ServerBinary() (string, error) {
	name := os.Getenv(ServerEnv)
	if name == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return "", fmt.Errorf("redis-server not found on PATH (or set %s to a redis-server-compatible binary): %w", ServerEnv, err)
		}
		return bin, nil
	}
	bin, err := exec.LookPath(name) // a path with a slash is checked as it is
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", ServerEnv, name, err)
	}
	return bin, nil
}

// serverChosen reports whether ServerEnv names a binary, so that a missing
// binary is an error rather than a reason to use miniredis.
func serverChosen() bool { return os.Getenv(ServerEnv) != "" }
