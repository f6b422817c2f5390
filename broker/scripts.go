package broker

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// script is one Lua script of scripts/, with what its header declares.
type script struct {
	name string
	lua  *redis.Script
	// readOnly: the header says "-- read-only": the script changes
	// nothing, so a durable broker need not wait for replicas after it.
	readOnly bool
}

// readOnlyMark is the header line of a script that changes nothing.
const readOnlyMark = "-- read-only"

// load returns the named script with the shared prelude prepended.
func load(name string) *script {
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		panic(err)
	}
	body, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	s := &script{name: name, lua: redis.NewScript(string(prelude) + "\n" + string(body))}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "--") {
			break // the header is the leading comment
		}
		if strings.TrimSpace(line) == readOnlyMark {
			s.readOnly = true
		}
	}
	return s
}

var (
	enqueueScript     = load("enqueue")
	pauseScript       = load("pause")
	limitScript       = load("limit")
	capScript         = load("cap")
	claimScript       = load("claim")
	settleScript      = load("settle")
	extendScript      = load("extend")
	reapScript        = load("reap")
	cancelScript      = load("cancel")
	rescheduleScript  = load("reschedule")
	redriveScript     = load("redrive")
	deadDeleteScript  = load("dead_delete")
	trimScript        = load("trim")
	statsScript       = load("stats")
	jobScript         = load("job")
	pageScript        = load("page")
	batchCreateScript = load("batch_create")
	batchAddScript    = load("batch_add")
	batchEndScript    = load("batch_end")
	batchFiredScript  = load("batch_fired")
	batchClearScript  = load("batch_clear")
	progressScript    = load("progress")
)
