package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// minRedisVersion is the oldest Redis release delayq runs on. Its scripts
// call ZMSCORE (enqueue's uniqueness and type-cap checks, claim's caps)
// and package periodic sends ZADD ... GT, both added in Redis 6.2.0;
// everything else it sends is older (ZPOPMIN 5.0; HSET of many fields
// and UNLINK 4.0). Valkey reports redis_version 7.2.4, the Redis release
// it forked from, so every Valkey release passes. docs/architecture.md
// lists the commands by the version that added them.
const minRedisVersion = "6.2.0"

// minVersion is minRedisVersion as numbers.
var minVersion = [3]int{6, 2, 0}

// versionCheckTimeout bounds New's check of the servers.
const versionCheckTimeout = 5 * time.Second

// ErrServerTooOld is wrapped by the error New returns for a server older
// than Redis 6.2.0 (6.2 has ZMSCORE and ZADD GT). The error names the server, the version it
// reported (or that it lacks ZMSCORE) and the minimum.
var ErrServerTooOld = errors.New("broker: server too old")

// checkMethod is how New found a server new enough, or that it could not
// tell.
type checkMethod string

const (
	// notChecked: New could not tell the server's version and went on
	// (serverCheck.Note says why). A server too old then fails at the
	// first script that calls a newer command, as before New checked.
	notChecked checkMethod = ""
	// checkedByVersion: INFO server's redis_version is at least
	// minRedisVersion.
	checkedByVersion checkMethod = "version"
	// checkedByProbe: INFO was refused (renamed or disabled, or not
	// allowed by an ACL such as that of `delayq acl`) or named no redis_version, and a
	// ZMSCORE probe (the command with too few arguments) found that the
	// server knows ZMSCORE.
	checkedByProbe checkMethod = "probe"
)

// serverCheck is what New learned of one server: the server of a single
// or Sentinel client, or one master of a cluster.
type serverCheck struct {
	// Addr is the server's address as the client dials it; empty for a
	// Sentinel failover client, whose master the Sentinels name.
	Addr string
	// Name is INFO's server_name ("valkey"), "redis" when INFO has a
	// redis_version but no server_name, empty when INFO was not read.
	Name string
	// Version is the server's own version: <server_name>_version (e.g.
	// valkey_version) when INFO has it, else redis_version.
	Version string
	// RedisVersion is INFO's redis_version, the Redis release whose
	// commands the server implements (7.2.4 on every Valkey so far); New
	// compares it with minRedisVersion.
	RedisVersion string
	// Checked is how the server was found new enough.
	Checked checkMethod
	// Note says why a server was checked by probe or not checked.
	Note string
}

// serverChecks returns what New learned of the servers, one entry per
// server (per master on a cluster, sorted by address). It never changes
// after New.
func (b *Broker) serverChecks() []serverCheck { return slices.Clone(b.servers) }

// checkServers reads the version of every server the client sends
// scripts to, once, and returns an error wrapping ErrServerTooOld for a
// server that is too old. A server whose version cannot be read is
// recorded as notChecked and is no reason to fail.
func (b *Broker) checkServers() error {
	ctx, cancel := context.WithTimeout(context.Background(), versionCheckTimeout)
	defer cancel()
	probeKey, skipInfo := b.ns+":version-probe", b.opts.Functions
	var (
		mu     sync.Mutex
		checks []serverCheck
		errs   []error
	)
	add := func(sc serverCheck, err error) {
		mu.Lock()
		defer mu.Unlock()
		checks = append(checks, sc)
		if err != nil {
			errs = append(errs, err)
		}
	}
	each := func(ctx context.Context, c *redis.Client) error {
		add(checkServer(ctx, c, c.Options().Addr, probeKey, skipInfo))
		return nil
	}
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		// Every master the client knows now; a master added later is not
		// checked (a cluster's nodes are upgraded together).
		if err := c.ForEachMaster(ctx, each); err != nil {
			add(serverCheck{Note: "not checked: the cluster's masters are not known: " + err.Error()}, nil)
		}
	case *redis.Ring:
		if err := c.ForEachShard(ctx, each); err != nil {
			add(serverCheck{Note: "not checked: the ring's shards are not known: " + err.Error()}, nil)
		}
	case *redis.Client:
		addr := c.Options().Addr
		if addr == "FailoverClient" { // go-redis's placeholder for a Sentinel failover client
			addr = ""
		}
		add(checkServer(ctx, c, addr, probeKey, skipInfo))
	default:
		add(checkServer(ctx, b.rdb, "", probeKey, skipInfo))
	}
	slices.SortFunc(checks, func(a, b serverCheck) int { return strings.Compare(a.Addr, b.Addr) })
	b.servers = checks
	return errors.Join(errs...)
}

// versionClient is what the check sends its two commands with: a client,
// or one node's client of a cluster or ring.
type versionClient interface {
	Info(ctx context.Context, sections ...string) *redis.StringCmd
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// probeZMSCORE sends ZMSCORE with a key and no member. A server answers a
// command with too few arguments ("wrong number of arguments") before it
// checks ACLs, reads a key or redirects to another cluster node, and one
// that does not have the command answers "unknown command": so the probe
// needs no right, logs nothing in the ACL log, and reads and writes
// nothing.
func probeZMSCORE(ctx context.Context, c versionClient, key string) (known bool, answer string, err error) {
	err = c.Do(ctx, "ZMSCORE", key).Err()
	if err == nil {
		return false, "a reply, not an error", errUnexpectedProbe
	}
	if !isReply(err) {
		return false, "", err
	}
	answer = strings.TrimSpace(err.Error())
	switch lower := strings.ToLower(answer); {
	case strings.Contains(lower, "wrong number of arg"):
		return true, answer, nil
	case strings.Contains(lower, "unknown") && strings.Contains(lower, "command"):
		return false, answer, nil
	}
	return false, answer, errUnexpectedProbe
}

var errUnexpectedProbe = errors.New("unexpected answer")

// checkServer checks one server: INFO server's redis_version, else (INFO
// refused or without a version, or not sent because the broker runs the
// function library, whose users are given no INFO) the ZMSCORE probe.
// Network errors leave the server notChecked.
func checkServer(ctx context.Context, c versionClient, addr, probeKey string, skipInfo bool) (serverCheck, error) {
	sc := serverCheck{Addr: addr}
	var why string
	if skipInfo {
		why = "INFO not sent (Options.Functions)"
	} else {
		info, err := c.Info(ctx, "server").Result()
		switch {
		case err == nil:
			parseInfo(info, &sc)
			if v, ok := parseVersion(sc.RedisVersion); ok {
				sc.Checked = checkedByVersion
				if less(v, minVersion) {
					return sc, tooOld(sc, sc.describe())
				}
				return sc, nil
			}
			why = "INFO server names no redis_version"
			if sc.RedisVersion != "" {
				why = fmt.Sprintf("INFO server's redis_version %q is not a version", sc.RedisVersion)
			}
		case isReply(err):
			why = "INFO refused: " + strings.TrimSpace(err.Error())
		default:
			sc.Note = "not checked: INFO server: " + err.Error()
			return sc, nil
		}
	}
	known, answer, err := probeZMSCORE(ctx, c, probeKey)
	switch {
	case errors.Is(err, errUnexpectedProbe):
		sc.Note = fmt.Sprintf("not checked: %s; the ZMSCORE probe answered %s", why, answer)
		return sc, nil
	case err != nil:
		sc.Note = fmt.Sprintf("not checked: %s; the ZMSCORE probe failed: %v", why, err)
		return sc, nil
	case known:
		sc.Checked, sc.Note = checkedByProbe, why+"; the server knows ZMSCORE"
		return sc, nil
	}
	sc.Checked, sc.Note = checkedByProbe, why+"; the server does not know ZMSCORE"
	return sc, tooOld(sc, "does not know ZMSCORE ("+why+")")
}

// tooOld is the error for a server found too old; what describes it.
func tooOld(sc serverCheck, what string) error {
	where := "the server"
	if sc.Addr != "" {
		where = "the server at " + sc.Addr
	}
	return fmt.Errorf("%w: %s %s; delayq needs Redis %s or later, or any Valkey (its scripts call ZMSCORE and package periodic sends ZADD GT, both added in Redis 6.2)",
		ErrServerTooOld, where, what, minRedisVersion)
}

// describe names the server's version as INFO gave it.
func (sc serverCheck) describe() string {
	switch {
	case sc.Name == "redis":
		return "is Redis " + sc.RedisVersion
	case sc.Version == sc.RedisVersion:
		return fmt.Sprintf("is %s with redis_version %s", sc.Name, sc.RedisVersion)
	}
	return fmt.Sprintf("is %s %s with redis_version %s", sc.Name, sc.Version, sc.RedisVersion)
}

// isReply reports whether err is the server's answer (an error reply),
// not a failure to reach it. An error that only wraps a reply is not one:
// a Sentinel failover client that finds no Sentinel answers "all sentinels
// ... are unreachable" wrapping what each address replied (a plain server
// replies "unknown command 'sentinel'"), which says nothing of the master.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && reply.Error() == err.Error()
}

// parseInfo fills sc's Name, Version and RedisVersion from INFO's text.
func parseInfo(info string, sc *serverCheck) {
	fields := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":"); ok {
			fields[k] = v
		}
	}
	sc.RedisVersion = fields["redis_version"]
	sc.Name = fields["server_name"]
	if sc.Name == "" && sc.RedisVersion != "" {
		sc.Name = "redis"
	}
	sc.Version = sc.RedisVersion
	if v := fields[sc.Name+"_version"]; v != "" {
		sc.Version = v
	}
}

// parseVersion reads "major.minor[.patch]" with an optional suffix after
// the numbers ("7.0.15", "8.0-rc1"): the first one to three numbers.
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v, false
	}
	for i, p := range parts {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil {
			if i < 2 {
				return v, false
			}
			break // "7.0-rc1": the patch level is 0
		}
		v[i] = n
		if end < len(p) {
			break
		}
	}
	return v, true
}

// less compares versions.
func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
