package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Environment variables with the credentials of the Sentinels, for a
// redis+sentinel:// URL whose Sentinels require them (the URL's own user and
// password are those of the data servers). Kept out of the URL and the flags
// so that they show neither in errors nor in the process list.
const (
	envSentinelUser     = "DELAYQ_SENTINEL_USER"
	envSentinelPassword = "DELAYQ_SENTINEL_PASSWORD"
)

// URL schemes of the deployments the tool reaches. A scheme with "rediss"
// speaks TLS.
const (
	schemeCluster     = "redis+cluster"
	schemeClusterTLS  = "rediss+cluster"
	schemeSentinel    = "redis+sentinel"
	schemeSentinelTLS = "rediss+sentinel"
)

// Default ports of an address given without one.
const (
	defaultRedisPort    = "6379"
	defaultSentinelPort = "26379"
)

// Connection defaults: fail fast when Redis is down.
const (
	dialTimeout   = 5 * time.Second
	dialerRetries = 2
)

// target is where the tool connects: one server (redis://, rediss://), or a
// Redis Cluster or a Sentinel-monitored master through go-redis's
// UniversalClient.
type target struct {
	single *redis.Options
	multi  *redis.UniversalOptions
}

// client returns a new client for the target.
func (t *target) client() redis.UniversalClient {
	if t.single != nil {
		return redis.NewClient(t.single)
	}
	return redis.NewUniversalClient(t.multi)
}

// String says where the target is, for errors; it holds no credentials.
func (t *target) String() string {
	switch {
	case t.single != nil:
		return "Redis at " + t.single.Addr
	case t.multi.MasterName != "":
		return fmt.Sprintf("Redis master %q through the Sentinels at %s", t.multi.MasterName, strings.Join(t.multi.Addrs, ","))
	default:
		return "Redis Cluster at " + strings.Join(t.multi.Addrs, ",")
	}
}

// parseTarget reads a Redis URL:
//
//	redis://[user[:password]@]host:port[/db][?options]   one server (redis.ParseURL)
//	redis+cluster://[user[:password]@]host:port[,host:port…][?options]
//	redis+sentinel://[user[:password]@]host:port[,host:port…]/master[/db][?options]
//
// and rediss, rediss+cluster and rediss+sentinel for TLS. getenv gives the
// Sentinels' credentials. No error holds the URL's password.
func parseTarget(raw string, getenv func(string) string) (*target, error) {
	scheme, _, _ := strings.Cut(raw, "://")
	switch scheme {
	case schemeCluster, schemeClusterTLS, schemeSentinel, schemeSentinelTLS:
	default:
		opts, err := parseRedisURL(raw)
		if err != nil {
			return nil, err
		}
		if opts.DialTimeout == 0 {
			opts.DialTimeout = dialTimeout
		}
		opts.DialerRetries = dialerRetries
		return &target{single: opts}, nil
	}
	opts, err := parseMultiURL(raw, scheme)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", redactURL(raw), err)
	}
	if opts.MasterName != "" {
		opts.SentinelUsername = getenv(envSentinelUser)
		opts.SentinelPassword = getenv(envSentinelPassword)
	}
	return &target{multi: opts}, nil
}

// multiOptions are the query options of cluster and Sentinel URLs.
var multiOptions = []string{"client_name", "dial_timeout", "protocol", "read_timeout", "write_timeout"}

// parseMultiURL parses a redis+cluster:// or redis+sentinel:// URL (or its
// rediss+ form). Its errors name the part that is wrong and never quote the
// user information.
func parseMultiURL(raw, scheme string) (*redis.UniversalOptions, error) {
	sentinel := strings.HasSuffix(scheme, "+sentinel")
	want := scheme + "://[user[:password]@]host:port[,host:port…][?options]"
	defPort := defaultRedisPort
	if sentinel {
		want = scheme + "://[user[:password]@]host:port[,host:port…]/MASTER[/DB][?options]"
		defPort = defaultSentinelPort
	}
	rest := strings.TrimPrefix(raw, scheme+"://")
	opts := &redis.UniversalOptions{DialTimeout: dialTimeout, DialerRetries: dialerRetries}

	// The user information runs to the last '@', as in redactURL: a password
	// with an unescaped '/', '?' or '#' is then still taken for one, and
	// refused, rather than read as an address and quoted.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		u, err := url.Parse("redis://" + rest[:at] + "@host")
		if err != nil || u.User == nil || u.Host != "host" {
			return nil, errors.New("its user or password does not parse (percent-encode '@', ':', '/', '?', '#' and '%' in them)")
		}
		opts.Username = u.User.Username()
		opts.Password, _ = u.User.Password()
		rest = rest[at+1:]
	}

	hosts, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		hosts, tail = rest[:i], rest[i:]
	}
	if hosts == "" {
		what := "a cluster node"
		if sentinel {
			what = "a Sentinel"
		}
		return nil, fmt.Errorf("no address of %s: want %s", what, want)
	}
	for _, a := range strings.Split(hosts, ",") {
		addr, err := parseAddr(a, defPort)
		if err != nil {
			return nil, err
		}
		opts.Addrs = append(opts.Addrs, addr)
	}

	u, err := url.Parse("redis://host" + tail)
	if err != nil {
		return nil, fmt.Errorf("the path or options do not parse: %v", errors.Unwrap(err))
	}
	if u.Fragment != "" || strings.HasSuffix(tail, "#") {
		return nil, fmt.Errorf("unexpected #%s: want %s", u.Fragment, want)
	}
	path := strings.Trim(u.Path, "/")
	if sentinel {
		master, db, _ := strings.Cut(path, "/")
		if master == "" {
			return nil, fmt.Errorf("missing master name: want %s", want)
		}
		opts.MasterName = master
		if db != "" {
			n, err := strconv.Atoi(db)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("invalid database number %q after the master name: want %s", db, want)
			}
			opts.DB = n
		}
	} else {
		opts.IsClusterMode = true
		if path != "" && path != "0" {
			return nil, fmt.Errorf("a cluster has only database 0: remove the path /%s", path)
		}
	}
	if err := queryOptions(u.Query(), opts); err != nil {
		return nil, err
	}
	if strings.HasPrefix(scheme, "rediss") {
		// No ServerName: each connection checks the certificate against the
		// address it dials (a node, a Sentinel, the master it names).
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return opts, nil
}

// parseAddr checks one host[:port] of a cluster or Sentinel URL and adds
// the default port when there is none.
func parseAddr(a, defPort string) (string, error) {
	if a == "" {
		return "", errors.New("an empty address in the list: separate host:port pairs with single commas")
	}
	host, port, err := net.SplitHostPort(a)
	if ae := (*net.AddrError)(nil); errors.As(err, &ae) && ae.Err == "missing port in address" {
		host, port, err = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]"), defPort, nil
	}
	if err != nil {
		return "", fmt.Errorf("address %q: want host:port", a)
	}
	if host == "" || strings.ContainsAny(host, " []") {
		return "", fmt.Errorf("address %q: missing or malformed host", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("address %q: invalid port %q", a, port)
	}
	return net.JoinHostPort(host, port), nil
}

// queryOptions sets the URL's options on opts.
func queryOptions(q url.Values, opts *redis.UniversalOptions) error {
	for name, vals := range q {
		v := vals[len(vals)-1]
		var err error
		switch name {
		case "client_name":
			opts.ClientName = v
		case "protocol":
			opts.Protocol, err = strconv.Atoi(v)
			if err == nil && opts.Protocol != 2 && opts.Protocol != 3 {
				err = errors.New("want 2 or 3")
			}
		case "dial_timeout":
			opts.DialTimeout, err = parseTimeout(v)
		case "read_timeout":
			opts.ReadTimeout, err = parseTimeout(v)
		case "write_timeout":
			opts.WriteTimeout, err = parseTimeout(v)
		default:
			return fmt.Errorf("unknown option %q (known: %s)", name, strings.Join(multiOptions, ", "))
		}
		if err != nil {
			return fmt.Errorf("invalid option %s=%q: %v", name, v, err)
		}
	}
	return nil
}

// parseTimeout reads a positive duration ("3s", "500ms").
func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New("want a positive duration such as 3s or 500ms")
	}
	return d, nil
}
