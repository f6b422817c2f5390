package outbox

import "regexp"

// A relay's last error is stored in Redis and shown by the dashboard and
// `delayq stats` to whoever can read them, who need not be able to read
// the database's connection settings. Drivers put those into their
// errors: pgx writes "failed to connect to `user=app database=shop`:
// 10.0.0.5:5432 (db.internal): dial error: …", PostgreSQL itself
// `password authentication failed for user "app"` or `database "shop"
// does not exist`. redactConnection replaces user and database names,
// host names, addresses, ports, socket paths and connection strings in
// such a message with xxxxx and keeps the rest (what failed, and why). The
// relay's own log keeps the whole error.

// redacted stands for what was removed.
const redacted = "xxxxx"

// redactions are applied in order; each replaces what it matches with its
// template.
var redactions = []struct {
	re   *regexp.Regexp
	with string
}{
	// A connection string or URL quoted in backticks (pgx) or anywhere.
	{regexp.MustCompile("`[^`]*(?:=|://)[^`]*`"), "`" + redacted + "`"},
	{regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.-]*://[^\s"'` + "`" + `]+`), redacted},
	// key=value settings of a libpq-style connection string.
	{regexp.MustCompile(`(?i)\b(user|username|database|dbname|db|host|hostaddr|port|password|passfile|service|servicefile|sslcert|sslkey|sslrootcert|sslpassword|application_name|target_session_attrs)=(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;)` + "`" + `]+)`), "${1}=" + redacted},
	// Names the server quotes: for user "app", role "app", database "shop".
	{regexp.MustCompile(`(?i)\b(user|role|database|db|schema|host) "(?:[^"\\]|\\.)*"`), `${1} "` + redacted + `"`},
	{regexp.MustCompile(`(?i)\b(user|role|database|db|schema|host) '(?:[^'\\]|\\.)*'(?:@'[^']*')?`), `${1} '` + redacted + `'`},
	// Unix socket paths (PostgreSQL's .s.PGSQL.<port>) and DNS lookups.
	{regexp.MustCompile(`[^\s"'(]*\.s\.PGSQL\.\d+`), redacted},
	{regexp.MustCompile(`\blookup [^\s:]+`), "lookup " + redacted},
	// Addresses with or without a port: IPv4, bracketed IPv6, name:port.
	{regexp.MustCompile(`\[[0-9A-Fa-f:.%]+\](?::\d+)?`), redacted},
	{regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b`), redacted},
	{regexp.MustCompile(`\b[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*:\d{1,5}\b`), redacted},
	// pgx names the host it dialled in parentheses after the address.
	{regexp.MustCompile(redacted + ` \([^)]*\)`), redacted},
}

// redactConnection returns msg without the connection details it names.
func redactConnection(msg string) string {
	for _, r := range redactions {
		msg = r.re.ReplaceAllString(msg, r.with)
	}
	return msg
}
