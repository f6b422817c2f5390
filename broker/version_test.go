package broker_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	dqadmin "github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/redistest"
)

// info is an INFO server reply with the given fields.
func info(fields ...string) string {
	return redistest.Bulk("# Server\r\n" + strings.Join(fields, "\r\n") + "\r\nredis_mode:standalone\r\n")
}

// scriptedClient is a client of s, closed at the test's cleanup.
func scriptedClient(t *testing.T, s *redistest.Scripted) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestNewRefusesServerOlderThan62: against a server that reports
// redis_version 6.0.20, New fails with an error wrapping ErrServerTooOld
// that names the server, the version found and the minimum, and sends
// nothing after INFO (nothing is stored).
func TestNewRefusesServerOlderThan62(t *testing.T) {
	t.Parallel()
	s := redistest.StartScripted(t, func(cmd []string) string {
		if strings.EqualFold(cmd[0], "INFO") {
			return info("redis_version:6.0.20", "redis_git_sha1:00000000")
		}
		return "-ERR unexpected command\r\n"
	})
	b, err := broker.New(scriptedClient(t, s), broker.Options{Namespace: "old"})
	if b != nil || !errors.Is(err, broker.ErrServerTooOld) {
		t.Fatalf("New = %v, %v; want an error wrapping ErrServerTooOld", b, err)
	}
	for _, want := range []string{s.Addr(), "is Redis 6.0.20", "needs Redis " + broker.MinRedisVersion + " or later", "ZMSCORE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
	if got := strings.Join(s.Commands(), " "); got != "INFO" {
		t.Errorf("the server was sent %q, want INFO alone", got)
	}
	t.Logf("%v", err)
}

// TestNewComparesRedisVersion: New compares INFO's redis_version with
// MinRedisVersion as numbers; on Valkey, which reports the Redis release it
// forked from beside valkey_version, the same field decides.
func TestNewComparesRedisVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		fields []string
		ok     bool
		want   broker.ServerCheck // Addr is filled in
	}{
		{"Redis 5.0.14", []string{"redis_version:5.0.14"}, false, broker.ServerCheck{}},
		{"Redis 6.0.20", []string{"redis_version:6.0.20"}, false, broker.ServerCheck{}},
		{"Redis 6.1.99", []string{"redis_version:6.1.99"}, false, broker.ServerCheck{}},
		{"Redis 6.2.0", []string{"redis_version:6.2.0"}, true,
			broker.ServerCheck{Name: "redis", Version: "6.2.0", RedisVersion: "6.2.0", Checked: broker.CheckedByVersion}},
		{"Redis 6.10.0 is newer than 6.2", []string{"redis_version:6.10.0"}, true,
			broker.ServerCheck{Name: "redis", Version: "6.10.0", RedisVersion: "6.10.0", Checked: broker.CheckedByVersion}},
		{"Redis 7.0.15", []string{"redis_version:7.0.15"}, true,
			broker.ServerCheck{Name: "redis", Version: "7.0.15", RedisVersion: "7.0.15", Checked: broker.CheckedByVersion}},
		{"Redis 8.0-rc1", []string{"redis_version:8.0-rc1"}, true,
			broker.ServerCheck{Name: "redis", Version: "8.0-rc1", RedisVersion: "8.0-rc1", Checked: broker.CheckedByVersion}},
		{"Valkey 8.0.1", []string{"redis_version:7.2.4", "server_name:valkey", "valkey_version:8.0.1"}, true,
			broker.ServerCheck{Name: "valkey", Version: "8.0.1", RedisVersion: "7.2.4", Checked: broker.CheckedByVersion}},
		{"another server with an old redis_version", []string{"redis_version:6.0.3", "server_name:other", "other_version:1.2"}, false, broker.ServerCheck{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartScripted(t, func(cmd []string) string {
				if strings.EqualFold(cmd[0], "INFO") {
					return info(tt.fields...)
				}
				return "-ERR unexpected command\r\n"
			})
			b, err := broker.New(scriptedClient(t, s), broker.Options{})
			if !tt.ok {
				if !errors.Is(err, broker.ErrServerTooOld) {
					t.Fatalf("New = %v; want an error wrapping ErrServerTooOld", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			tt.want.Addr = s.Addr()
			if got := b.ServerChecks(); len(got) != 1 || got[0] != tt.want {
				t.Fatalf("ServerChecks() = %+v, want [%+v]", got, tt.want)
			}
		})
	}
}

// TestNewWhenServerRefusesINFO: a server that refuses INFO (renamed or
// disabled, or an ACL user without +info) is not refused for that: New
// sends ZMSCORE without a member to learn whether it knows the command,
// refuses it only when it does not, and goes on unchecked when the answer
// says neither.
func TestNewWhenServerRefusesINFO(t *testing.T) {
	t.Parallel()
	const (
		unknownINFO = "-ERR unknown command 'INFO', with args beginning with: 'server' \r\n"
		noPermINFO  = "-NOPERM User delayq has no permissions to run the 'info' command\r\n"
	)
	for _, tt := range []struct {
		name    string
		info    string // reply to INFO
		probe   string // reply to ZMSCORE
		ok      bool
		checked broker.CheckMethod
		note    string // in the ServerCheck's Note, or the error
	}{
		{"INFO renamed, ZMSCORE known", unknownINFO,
			"-ERR wrong number of arguments for 'zmscore' command\r\n", true, broker.CheckedByProbe, "knows ZMSCORE"},
		{"INFO not permitted, ZMSCORE known", noPermINFO,
			"-ERR wrong number of arguments for 'zmscore' command\r\n", true, broker.CheckedByProbe, "INFO refused: NOPERM"},
		{"INFO without a version, ZMSCORE known", info("uptime_in_seconds:5"),
			"-ERR wrong number of arguments for 'zmscore' command\r\n", true, broker.CheckedByProbe, "names no redis_version"},
		{"redis_version not a version, ZMSCORE known", redistest.Bulk("redis_version:unknown\r\n"),
			"-ERR wrong number of arguments for 'zmscore' command\r\n", true, broker.CheckedByProbe, `redis_version "unknown" is not a version`},
		{"INFO renamed, ZMSCORE unknown (Redis 6.0)", unknownINFO,
			"-ERR unknown command 'ZMSCORE', with args beginning with: 'delayq:version-probe' \r\n", false, "", "does not know ZMSCORE (INFO refused: ERR unknown command 'INFO'"},
		{"INFO not permitted, the probe answered NOPERM", noPermINFO,
			"-NOPERM User delayq has no permissions to run the 'zmscore' command\r\n", true, broker.NotChecked, "the ZMSCORE probe answered NOPERM"},
		{"INFO renamed, an unexpected probe answer", unknownINFO,
			":1\r\n", true, broker.NotChecked, "the ZMSCORE probe answered a reply, not an error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartScripted(t, func(cmd []string) string {
				switch strings.ToUpper(cmd[0]) {
				case "INFO":
					return tt.info
				case "ZMSCORE":
					return tt.probe
				}
				return "-ERR unexpected command\r\n"
			})
			b, err := broker.New(scriptedClient(t, s), broker.Options{})
			if got := strings.Join(s.Commands(), " "); got != "INFO ZMSCORE" {
				t.Errorf("the server was sent %q, want INFO ZMSCORE", got)
			}
			if !tt.ok {
				if !errors.Is(err, broker.ErrServerTooOld) || !strings.Contains(err.Error(), tt.note) || !strings.Contains(err.Error(), s.Addr()) {
					t.Fatalf("New = %v; want an error wrapping ErrServerTooOld that names %s and says %q", err, s.Addr(), tt.note)
				}
				t.Logf("%v", err)
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			got := b.ServerChecks()
			if len(got) != 1 || got[0].Checked != tt.checked || !strings.Contains(got[0].Note, tt.note) || got[0].Addr != s.Addr() {
				t.Fatalf("ServerChecks() = %+v; want one of %s, Checked %q, a Note saying %q", got, s.Addr(), tt.checked, tt.note)
			}
			t.Logf("%+v", got[0])
		})
	}
}

// TestNewOnRealServerWithoutINFO: a real server with INFO renamed away,
// and a user with ACLRules (which do not allow INFO), are checked by the
// ZMSCORE probe; with ZMSCORE renamed away too, the real server's answer
// to the probe is that of a server before 6.2, and New refuses it.
func TestNewOnRealServerWithoutINFO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("INFO renamed", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--rename-command", "INFO", "")
		b, err := broker.New(srv.Client(t), broker.Options{})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if got := b.ServerChecks(); len(got) != 1 || got[0].Checked != broker.CheckedByProbe || !strings.Contains(got[0].Note, "knows ZMSCORE") {
			t.Fatalf("ServerChecks() = %+v; want checked by probe", got)
		}
	})

	t.Run("INFO and ZMSCORE renamed, as on Redis 6.0", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--rename-command", "INFO", "", "--rename-command", "ZMSCORE", "")
		b, err := broker.New(srv.Client(t), broker.Options{})
		if b != nil || !errors.Is(err, broker.ErrServerTooOld) || !strings.Contains(err.Error(), "does not know ZMSCORE") {
			t.Fatalf("New = %v, %v; want an error wrapping ErrServerTooOld that says the server does not know ZMSCORE", b, err)
		}
	})

	t.Run("ACL user given ACLRules", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		admin := srv.Client(t)
		args := []any{"ACL", "SETUSER", "delayq-v", "reset", "on", ">s3cret"}
		for _, r := range strings.Fields(dqadmin.ACLRules("acl-v")) {
			args = append(args, r)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("ACL SETUSER: %v", err)
		}
		user := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "delayq-v", Password: "s3cret"})
		t.Cleanup(func() { _ = user.Close() })
		if err := user.Info(ctx, "server").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("INFO as the ACL user = %v; want NOPERM", err)
		}
		b, err := broker.New(user, broker.Options{Namespace: "acl-v"})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if got := b.ServerChecks(); len(got) != 1 || got[0].Checked != broker.CheckedByProbe || !strings.Contains(got[0].Note, "NOPERM") {
			t.Fatalf("ServerChecks() = %+v; want checked by probe after NOPERM", got)
		}
	})
}

// TestNewOnMiniredis: the embedded server of the examples answers no INFO
// server section; the probe finds ZMSCORE and New goes on.
func TestNewOnMiniredis(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatalf("New on miniredis: %v", err)
	}
	if got := b.ServerChecks(); len(got) != 1 || got[0].Checked != broker.CheckedByProbe {
		t.Fatalf("ServerChecks() = %+v; want checked by probe", got)
	}
}

// TestNewWhenServerUnreachable: a server that cannot be reached is no
// reason to refuse (it may come up later); ServerChecks says it was not
// checked.
func TestNewWhenServerUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatalf("New with the server down: %v", err)
	}
	if got := b.ServerChecks(); len(got) != 1 || got[0].Checked != broker.NotChecked || !strings.Contains(got[0].Note, "not checked: INFO server:") {
		t.Fatalf("ServerChecks() = %+v; want not checked, saying INFO failed", got)
	}
}

// TestNewWhenNoSentinelAnswers: a Sentinel failover client whose one
// "Sentinel" is a plain server (it answers "unknown command 'sentinel'")
// reaches no master. New is no judge of that: it leaves the server not
// checked rather than calling it too old, and the first command fails
// saying the Sentinels are unreachable.
func TestNewWhenNoSentinelAnswers(t *testing.T) {
	t.Parallel()
	plain := redistest.Start(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{plain.Addr()}, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatalf("New through no Sentinel: %v; want no error (the version is not known)", err)
	}
	if got := b.ServerChecks(); len(got) != 1 || got[0].Checked != broker.NotChecked || !strings.Contains(got[0].Note, "sentinels") {
		t.Fatalf("ServerChecks() = %+v; want not checked, naming the unreachable Sentinels", got)
	}
	if err := c.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "sentinels") {
		t.Fatalf("Ping through no Sentinel: %v; want the Sentinels unreachable", err)
	}
}

// TestNewChecksEveryServerOfTheTopology: on the shared server of the
// topology under test (DELAYQ_TEST_TOPOLOGY), New checks every master of
// a cluster, or the one server, by version.
func TestNewChecksEveryServerOfTheTopology(t *testing.T) {
	t.Parallel()
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	got := b.ServerChecks()
	want := int32(1)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var masters atomic.Int32 // ForEachMaster runs fn concurrently
		if err := cc.ForEachMaster(context.Background(), func(context.Context, *redis.Client) error {
			masters.Add(1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want = masters.Load()
	}
	if int32(len(got)) != want {
		t.Fatalf("ServerChecks() = %+v; want %d entries", got, want)
	}
	seen := map[string]bool{}
	for _, sc := range got {
		if sc.Checked != broker.CheckedByVersion || sc.RedisVersion == "" || seen[sc.Addr] {
			t.Fatalf("ServerChecks() = %+v; want each server once, checked by version", got)
		}
		seen[sc.Addr] = true
	}
	t.Logf("%s: %+v", redistest.Topology(), got)
}

// TestNewWithFunctionsSendsNoINFO: a broker that runs the function library
// is meant for a user without INFO (FunctionsACLRules); New checks it by
// the ZMSCORE probe alone, so that such a user leaves nothing in the ACL
// log.
func TestNewWithFunctionsSendsNoINFO(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		probe string
		ok    bool
	}{
		{"-ERR wrong number of arguments for 'zmscore' command\r\n", true},
		{"-ERR unknown command 'ZMSCORE', with args beginning with: 'delayq:version-probe' \r\n", false},
	} {
		s := redistest.StartScripted(t, func(cmd []string) string {
			if strings.EqualFold(cmd[0], "ZMSCORE") {
				return tt.probe
			}
			return "-ERR unexpected command\r\n"
		})
		b, err := broker.New(scriptedClient(t, s), broker.Options{Functions: true})
		if got := strings.Join(s.Commands(), " "); got != "ZMSCORE" {
			t.Errorf("the server was sent %q, want ZMSCORE alone", got)
		}
		if !tt.ok {
			if !errors.Is(err, broker.ErrServerTooOld) || !strings.Contains(err.Error(), "does not know ZMSCORE") {
				t.Errorf("New = %v; want an error wrapping ErrServerTooOld", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if got := b.ServerChecks(); len(got) != 1 || got[0].Checked != broker.CheckedByProbe || !strings.Contains(got[0].Note, "INFO not sent") {
			t.Errorf("ServerChecks() = %+v; want checked by probe, INFO not sent", got)
		}
	}
}
