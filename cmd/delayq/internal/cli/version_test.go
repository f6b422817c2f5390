package cli_test

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/redistest"
)

// TestServerTooOld: against a server that reports Redis 6.0.20, every
// command that connects fails at once with the broker's error, which
// names the version found and the minimum, in one line and with exit
// status 1 (not a usage error), before it sends anything but INFO.
func TestServerTooOld(t *testing.T) {
	t.Parallel()
	srv := redistest.StartScripted(t, func(cmd []string) string {
		if strings.EqualFold(cmd[0], "INFO") {
			return redistest.Bulk("# Server\r\nredis_version:6.0.20\r\n")
		}
		return "-ERR unexpected command\r\n"
	})
	env := []string{"REDIS_URL=redis://" + srv.Addr() + "/0"}
	for _, args := range [][]string{
		{"stats"},
		{"enqueue", "--type", "t", "--payload", "{}"},
	} {
		r := runBinary(t, env, "", args...)
		if r.code != 1 || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("delayq %q: exit %d, stderr %q; want exit 1 and one line", args, r.code, r.stderr)
		}
		t.Logf("delayq %q: %s", args, strings.TrimSpace(r.stderr))
		for _, want := range []string{"server too old", "is Redis 6.0.20", "needs Redis 6.2.0 or later"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("delayq %q: stderr %q does not say %q", args, r.stderr, want)
			}
		}
	}
	if got := strings.Join(srv.Commands(), " "); got != "INFO INFO" {
		t.Errorf("the server was sent %q, want one INFO per command", got)
	}
}
