package admin

import (
	"slices"
	"strings"

	"github.com/delayq/delayq/internal/keyspace"
)

// aclCommands are the Redis commands a *broker.Broker sends, directly or from its
// scripts (Redis checks a script's commands against the caller's ACL too).
var aclCommands = []string{
	// sent by Go code
	"evalsha", "eval", // scripts: EVALSHA, and EVAL when the script cache was emptied
	"sadd", "smembers", "sismember", "srem", // the namespace's set of queue names (srem: Forget)
	"watch", "unwatch", "del", // Forget's check-and-clear of each shard; a process leaving the registry
	"hmget", "hget", "zscore", "zrevrangebyscore", // reading dead records
	"hlen", "unlink", "multi", "exec", // purging dead records
	"subscribe", "unsubscribe", "ping", // wake-up notices (PING is the Pub/Sub health check)
	"cluster|slots",      // a cluster client reads the slot map with it; others never send it
	"hscan", "zrevrange", // the reaper's sweep of batch endings; listing batches; keys.lua (HeldKeys)
	"memory|usage", // admin.QueueMemory: what a queue's keys take (the dashboard's queue page)
	// called by scripts
	"time", "type", "exists", "pexpire", "pttl",
	"get", "set", "incr", "incrby",
	"hset", "hsetnx", "hdel", "hexists", "hincrby", "hgetall", "hkeys", "expire",
	"zadd", "zrem", "zrange", "zrangebyscore", "zremrangebyrank", "zremrangebyscore", "zmscore", "zcard", "zcount", "zrank",
	"zpopmin", "zincrby", "publish",
	"llen", "rpush", "lrange", "ltrim", // the trimmed dead records kept for a worker's hook
}

// ACLRules returns the Redis ACL rules that let a user do everything a
// broker with namespace ns does, and nothing else: its keys (ns:*), its
// wake-up channels (ns:*) and the commands it sends. `delayq acl` prints
// them (docs/security.md); give them to a user with ACL SETUSER, e.g. for
// the default namespace:
//
//	ACL SETUSER delayq reset on >password <ACLRules("delayq")>
//
// A namespace that begins with ns followed by ':' matches the same pattern,
// so namespaces that must not see each other should not nest that way.
//
// The rules grant EVAL and EVALSHA, which run any Lua code: such a user
// can run a script that loops forever and stalls the server for every
// namespace (its keys stay its own). FunctionsACLRules gives a user that
// cannot.
func ACLRules(ns string) string {
	return aclRuleString(ns, aclCommands)
}

// FunctionsACLRules returns the rules of ACLRules(ns) for a broker with
// Options.Functions (`delayq acl --functions` prints them): FCALL and
// FCALL_RO, which call only the functions an administrator loaded
// (`delayq admin load-functions`), instead of EVALSHA and EVAL. Such a user
// can run no code of its own: neither EVAL nor EVALSHA, SCRIPT or FUNCTION.
func FunctionsACLRules(ns string) string {
	cmds := slices.DeleteFunc(slices.Clone(aclCommands), func(c string) bool { return c == "evalsha" || c == "eval" })
	return aclRuleString(ns, append([]string{"fcall", "fcall_ro"}, cmds...))
}

func aclRuleString(ns string, cmds []string) string {
	return "resetkeys ~" + ns + ":* resetchannels &" + ns + ":* -@all +" + strings.Join(cmds, " +")
}

// Namespace returns ns, or DefaultNamespace when ns is empty, and what is
// wrong with it ("" when nothing is): the check broker.New makes.
func Namespace(ns string) (string, string) { return keyspace.Namespace(ns) }
