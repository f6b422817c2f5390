package outbox

import (
	"strings"
	"testing"
)

// TestRedactConnection: the messages drivers write when a connection
// fails lose the user, database, host, address, port, socket path and
// connection string they hold, and keep what failed and why.
func TestRedactConnection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{ // pgx, server stopped
			"outbox: relay delayq_outbox: failed to connect to `user=app_user database=shop_db`: 127.0.0.1:45123 (db.internal): dial error: dial tcp 127.0.0.1:45123: connect: connection refused",
			"outbox: relay delayq_outbox: failed to connect to `xxxxx`: xxxxx: dial error: dial tcp xxxxx: connect: connection refused",
		},
		{ // pgx, a role that may not log in
			"failed to connect to `user=app_user database=shop_db`: [2001:db8::7]:5432 (db.internal): server error: FATAL: role \"app_user\" is not permitted to log in (SQLSTATE 28000)",
			"failed to connect to `xxxxx`: xxxxx: server error: FATAL: role \"xxxxx\" is not permitted to log in (SQLSTATE 28000)",
		},
		{ // PostgreSQL via lib/pq
			`pq: password authentication failed for user "app_user"`,
			`pq: password authentication failed for user "xxxxx"`,
		},
		{
			`pq: database "shop_db" does not exist`,
			`pq: database "xxxxx" does not exist`,
		},
		{ // pgx, DNS
			"failed to connect to `user=app_user database=shop_db`: hostname resolving error: lookup db.internal on 10.0.0.2:53: no such host",
			"failed to connect to `xxxxx`: hostname resolving error: lookup xxxxx on xxxxx: no such host",
		},
		{ // pgx, a Unix socket
			"failed to connect to `user=app_user database=shop_db`: /run/pg/.s.PGSQL.5432 (/run/pg): dial error: dial unix /run/pg/.s.PGSQL.5432: connect: no such file or directory",
			"failed to connect to `xxxxx`: xxxxx: dial error: dial unix xxxxx: connect: no such file or directory",
		},
		{ // a connection string or URL quoted anywhere
			"cannot open host=db.internal port=5432 user=app_user dbname='shop db' sslmode=disable",
			"cannot open host=xxxxx port=xxxxx user=xxxxx dbname=xxxxx sslmode=disable",
		},
		{
			"cannot parse `postgres://app_user:xxxxx@db.internal:5432/shop_db`: invalid port",
			"cannot parse `xxxxx`: invalid port",
		},
		{
			"dial postgres://app_user@db.internal/shop_db failed",
			"dial xxxxx failed",
		},
		{ // MySQL style
			"Error 1045 (28000): Access denied for user 'app_user'@'10.1.2.3' (using password: YES)",
			"Error 1045 (28000): Access denied for user 'xxxxx' (using password: YES)",
		},
		{ // nothing to hide
			"outbox: relay delayq_outbox: 3 of 10 rows wait for the next try: broker: not confirmed by enough replicas: 0 of 1 replica(s) within 1s",
			"outbox: relay delayq_outbox: 3 of 10 rows wait for the next try: broker: not confirmed by enough replicas: 0 of 1 replica(s) within 1s",
		},
		{
			"FATAL: terminating connection due to administrator command (SQLSTATE 57P01)",
			"FATAL: terminating connection due to administrator command (SQLSTATE 57P01)",
		},
	} {
		got := redactConnection(c.in)
		if got != c.want {
			t.Errorf("redactConnection(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
		for _, secret := range []string{"app_user", "shop_db", "shop db", "db.internal", "127.0.0.1", "45123", "2001:db8", "10.0.0.2", "10.1.2.3", "/run/pg"} {
			if strings.Contains(got, secret) {
				t.Errorf("redactConnection(%q) keeps %q", c.in, secret)
			}
		}
	}
}
