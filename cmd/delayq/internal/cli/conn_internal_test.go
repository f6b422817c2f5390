package cli

import (
	"crypto/tls"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// parseTarget turns each kind of URL into the client go-redis needs, with
// the addresses, credentials, database, TLS and options it gives.
func TestParseTarget(t *testing.T) {
	t.Parallel()
	env := map[string]string{envSentinelUser: "watcher", envSentinelPassword: "sentinel-pw"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		url  string
		want redis.UniversalOptions // of cluster and Sentinel URLs
		kind string                 // "single", "cluster", "failover"
	}{
		{url: "redis+cluster://h1:7000,h2:7001,[::1]:7002", kind: "cluster",
			want: redis.UniversalOptions{Addrs: []string{"h1:7000", "h2:7001", "[::1]:7002"}, IsClusterMode: true}},
		{url: "redis+cluster://h1", kind: "cluster",
			want: redis.UniversalOptions{Addrs: []string{"h1:6379"}, IsClusterMode: true}},
		{url: "rediss+cluster://ops:p%40ss@h1:7000/0?dial_timeout=2s&read_timeout=1500ms&write_timeout=3s&client_name=oncall&protocol=2", kind: "cluster",
			want: redis.UniversalOptions{Addrs: []string{"h1:7000"}, IsClusterMode: true, Username: "ops", Password: "p@ss",
				DialTimeout: 2 * time.Second, ReadTimeout: 1500 * time.Millisecond, WriteTimeout: 3 * time.Second, ClientName: "oncall", Protocol: 2}},
		{url: "redis+sentinel://s1,s2:26380/mymaster", kind: "failover",
			want: redis.UniversalOptions{Addrs: []string{"s1:26379", "s2:26380"}, MasterName: "mymaster"}},
		{url: "rediss+sentinel://:pw@[::1]/my%20master/2/", kind: "failover",
			want: redis.UniversalOptions{Addrs: []string{"[::1]:26379"}, MasterName: "my master", DB: 2, Password: "pw"}},
		{url: "redis://ops:pw@h1:6380/3", kind: "single"},
	} {
		tgt, err := parseTarget(c.url, getenv)
		if err != nil {
			t.Errorf("%q: %v", c.url, err)
			continue
		}
		rdb := tgt.client()
		var kind string
		switch cl := rdb.(type) {
		case *redis.ClusterClient:
			kind = "cluster"
		case *redis.Client:
			kind = "single"
			if cl.Options().Addr == "FailoverClient" {
				kind = "failover"
			}
		}
		_ = rdb.Close()
		if kind != c.kind {
			t.Errorf("%q: a %s client, want %s", c.url, kind, c.kind)
		}
		if c.kind == "single" {
			o := tgt.single
			if o.Addr != "h1:6380" || o.Username != "ops" || o.Password != "pw" || o.DB != 3 || o.DialTimeout != dialTimeout || o.DialerRetries != dialerRetries {
				t.Errorf("%q: %+v", c.url, o)
			}
			continue
		}
		got, w := tgt.multi, c.want
		if w.DialTimeout == 0 {
			w.DialTimeout = dialTimeout
		}
		if !slices.Equal(got.Addrs, w.Addrs) || got.IsClusterMode != w.IsClusterMode || got.MasterName != w.MasterName || got.DB != w.DB ||
			got.Username != w.Username || got.Password != w.Password || got.DialTimeout != w.DialTimeout || got.ReadTimeout != w.ReadTimeout ||
			got.WriteTimeout != w.WriteTimeout || got.ClientName != w.ClientName || got.Protocol != w.Protocol || got.DialerRetries != dialerRetries {
			t.Errorf("%q:\n got %+v\nwant %+v", c.url, got, w)
		}
		// TLS exactly for rediss, checking each address it dials.
		wantTLS := c.url[:6] == "rediss"
		if (got.TLSConfig != nil) != wantTLS || wantTLS && (got.TLSConfig.ServerName != "" || got.TLSConfig.MinVersion != tls.VersionTLS12) {
			t.Errorf("%q: TLS config %+v, want TLS %v", c.url, got.TLSConfig, wantTLS)
		}
		// Sentinel credentials come from the environment, for Sentinel URLs only.
		sentinel := w.MasterName != ""
		if sentinel && (got.SentinelUsername != "watcher" || got.SentinelPassword != "sentinel-pw") || !sentinel && got.SentinelPassword != "" {
			t.Errorf("%q: Sentinel credentials %q/%q", c.url, got.SentinelUsername, got.SentinelPassword)
		}
	}
}
