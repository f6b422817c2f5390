package broker

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// load returns the named script with the shared prelude prepended.
func load(name string) *redis.Script {
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		panic(err)
	}
	body, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(strings.Join([]string{string(prelude), string(body)}, "\n"))
}

var (
	enqueueScript    = load("enqueue")
	claimScript      = load("claim")
	ackScript        = load("ack")
	retryScript      = load("retry")
	killScript       = load("kill")
	extendScript     = load("extend")
	releaseScript    = load("release")
	reapScript       = load("reap")
	cancelScript     = load("cancel")
	rescheduleScript = load("reschedule")
	redriveScript    = load("redrive")
	deadDeleteScript = load("dead_delete")
	trimScript       = load("trim")
	statsScript      = load("stats")
	jobScript        = load("job")
	pageScript       = load("page")
)
