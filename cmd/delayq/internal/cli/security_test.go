package cli_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// The Redis password never reaches the terminal: not when the URL does not
// parse (url.Parse quotes the whole URL in its errors), not when a part of
// it is wrong, not when the server refuses it.
func TestRedisPasswordRedacted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--requirepass", "TheRightOne-0123")
	for _, c := range []struct {
		url  string
		code int
		want string
	}{
		{"redis://user:SuperSecretPw@127.0.0.1:notaport/0", 2, `invalid --redis-url: parse "redis://user:xxxxx@127.0.0.1:notaport/0": invalid port`},
		{"redis://user:Super/Secret?Pw@127.0.0.1:6379/0", 2, `"redis://user:xxxxx@127.0.0.1:6379/0": its user or password does not parse`},
		{"redis://user:Super%zzSecretPw@127.0.0.1:6379/0", 2, "does not parse"},
		{"redis://user:SuperSecretPw@127.0.0.1:6379/not-a-db", 2, "invalid database number"},
		{"http://user:SuperSecretPw@127.0.0.1:6379/0", 2, "invalid URL scheme"},
		{"user:SuperSecretPw@127.0.0.1:6379", 2, "invalid --redis-url"},
		{"redis://:SuperSecretPw@" + srv.Addr() + "/0", 1, "WRONGPASS"},
		{"redis://user:SuperSecretPw@127.0.0.1:1/0", 1, "cannot connect to Redis at 127.0.0.1:1"},
	} {
		for how, r := range eachWay(t, c.url, "stats") {
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s %q: exit %d, stderr %q; want exit %d and %q", how, c.url, r.code, r.stderr, c.code, c.want)
			}
			for _, piece := range []string{"Super", "Secret", "TheRightOne"} {
				if strings.Contains(r.stdout+r.stderr, piece) {
					t.Errorf("%s %q: the output shows %q: %q", how, c.url, piece, r.stderr)
				}
			}
		}
	}
}

// hostile is text a handler could put in an error or a header: colours, a
// clear-screen, a carriage return that overwrites the line, NUL, BEL, DEL,
// C1 controls (CSI as one byte), bidi overrides, and a byte that is not
// UTF-8.
const hostile = "\x1b[31mred\x1b[0m \x1b[2J\rNUL\x00BEL\a DEL\x7f C1\u0085\u009b31m RLO\u202eevil\u202c FSI\u2068x\u2069 bad\xff"

// valid drops the bytes of s that are not UTF-8 (headers must be UTF-8).
func valid(s string) string { return strings.ToValidUTF8(s, "") }

// forbidden reports the first character of out a terminal would act on.
func forbidden(out string, layout bool) string {
	if !utf8.ValidString(out) {
		return "a byte that is not UTF-8"
	}
	for i, r := range out {
		switch {
		case r == '\n', layout && r == '\t':
		case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
			return out[i:min(len(out), i+8)]
		}
	}
	return ""
}

// Tables and show output escape control characters from stored text;
// --json output is byte-exact, and --json --ascii the same JSON in
// printable ASCII.
func TestTerminalOutputEscaped(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	id := "bidi\u202eid\u0085"
	stack := "panic: " + hostile + "\n\ngoroutine 1 [running]:\n\t/app/main.go:1 +0x1"
	env := &job.Envelope{ID: id, Queue: "q", Type: "t", Payload: []byte(`{"s":"` + "\x7f\u202e\u0085" + `"}`), Headers: map[string]string{"k\x1b": "v" + valid(hostile)}}
	if err := tb.b.Enqueue(tb.ctx, env); err != nil {
		t.Fatal(err)
	}
	res, err := testkit.Drive(tb.b).Claim(tb.ctx, "q", 1, time.Minute)
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claim: %v", err)
	}
	if _, err := testkit.Drive(tb.b).Kill(tb.ctx, res.Jobs[0].Lease, &job.DeadRecord{Type: "t", Body: res.Jobs[0].Body, Error: stack, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	sched := &job.Envelope{ID: "s\u202e1", Queue: "q", Type: "t", Payload: []byte(`{}`), Delay: time.Hour, Headers: map[string]string{"h": valid(hostile)}, LastError: hostile}
	if err := tb.b.Enqueue(tb.ctx, sched); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		args   []string
		layout bool // newlines and tabs of a stack trace stay
		want   []string
	}{
		{[]string{"dead", "ls"}, false, []string{`\x1b[31mred\x1b[0m \x1b[2J\rNUL\x00BEL\x07 DEL\x7f C1\u0085\u009b31m RLO\u202eevil`, `bidi\u202eid\u0085`}},
		{[]string{"dead", "ls", "--error", "\x1b[31m"}, false, []string{`\x1b[31mred`}},
		{[]string{"dead", "ls", "--error", "\x1b[nothing"}, false, []string{`no dead jobs whose error contains "\x1b[nothing"`}},
		{[]string{"dead", "show", id, "--queue", "q"}, true, []string{"Error:\n  panic: \\x1b[31mred", "FSI\\u2068x\\u2069 bad\ufffd", "\n  \t/app/main.go:1 +0x1", `Header:    k\x1b=v\x1b[31m`, `"s":"\x7f\u202e\u0085"`}},
		{[]string{"jobs", "show", "s\u202e1", "--queue", "q"}, false, []string{`ID:          s\u202e1`, `Last error:  \x1b[31mred`, `h=\x1b[31mred`}},
		{[]string{"jobs", "ls", "--queue", "q"}, false, []string{`s\u202e1`}},
		{[]string{"jobs", "cancel", "s\u202e1", "--queue", "q"}, false, []string{`cancelled s\u202e1`}},
	} {
		r := tb.run(t, c.args...)
		if r.code != 0 {
			t.Fatalf("delayq %q: exit %d, stderr %q", c.args, r.code, r.stderr)
		}
		if bad := forbidden(r.stdout, c.layout); bad != "" {
			t.Errorf("delayq %q writes %q raw to the terminal:\n%s", c.args, bad, r.stdout)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("delayq %q: output lacks %q:\n%s", c.args, w, r.stdout)
			}
		}
	}
	// An error message on stderr is escaped too.
	r := tb.run(t, "dead", "show", "no\u202esuch")
	if r.code != 1 || forbidden(r.stderr, false) != "" || !strings.Contains(r.stderr, `no\u202esuch`) {
		t.Errorf("not found: exit %d, stderr %q", r.code, r.stderr)
	}

	// JSON is the stored text, byte for byte: encoding/json's own escapes
	// for C0 controls, the rest as it is.
	out := tb.ok(t, "dead", "show", id, "--queue", "q", "--json")
	var rec struct {
		ID      string            `json:"id"`
		Error   string            `json:"error"`
		Headers map[string]string `json:"headers"`
		Payload json.RawMessage   `json:"payload"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	// Invalid UTF-8 becomes U+FFFD in any JSON encoder; everything else
	// comes back exactly.
	wantErr := strings.ToValidUTF8(stack, "\uFFFD")
	if rec.ID != id || rec.Error != wantErr || rec.Headers["k\x1b"] != "v"+valid(hostile) || string(rec.Payload) != string(env.Payload) {
		t.Fatalf("--json changed the record: %+v", rec)
	}
	enc, _ := json.Marshal(wantErr)
	if !strings.Contains(out, strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(string(enc), `\u003c`, "<"), `\u003e`, ">"), `\u0026`, "&")) {
		t.Fatalf("--json output is not the plain encoding of the error:\n%s", out)
	}
	if !strings.Contains(out, "\x7f") || !strings.Contains(out, "\u202e") {
		t.Fatal("--json output was escaped for the terminal")
	}

	// --json --ascii is the same JSON with nothing a terminal acts on:
	// printable ASCII only, every other character a \u escape.
	for _, args := range [][]string{{"dead", "show", id, "--queue", "q"}, {"dead", "ls"}, {"dead", "ls", "--queue", "q"}} {
		plain := tb.ok(t, append(args, "--json")...)
		ascii := tb.ok(t, append(args, "--json", "--ascii")...)
		for i, c := range []byte(ascii) {
			if (c < 0x20 || c > 0x7e) && c != '\n' {
				t.Fatalf("delayq %q --json --ascii writes byte %#x at %d:\n%s", args, c, i, ascii)
			}
		}
		var p, a any
		if err := json.Unmarshal([]byte(plain), &p); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(ascii), &a); err != nil {
			t.Fatalf("delayq %q --json --ascii: %v\n%s", args, err, ascii)
		}
		if !reflect.DeepEqual(p, a) {
			t.Errorf("delayq %q: --json --ascii decodes to\n%v\nand --json to\n%v", args, a, p)
		}
	}
	if r := tb.run(t, "dead", "ls", "--ascii"); r.code != 2 || !strings.Contains(r.stderr, "--ascii shapes JSON output") {
		t.Errorf("--ascii without --json: exit %d, stderr %q", r.code, r.stderr)
	}
}

// dead ls with a filter follows the partial pages of the scan budget: the
// listing (and its JSON) is the same whatever the budget.
func TestDeadLsFollowsTheScanCursor(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	types := []string{"rare"}
	for i := range 19 {
		types = append(types, "common"+string(rune('a'+i)))
	}
	tb.killMany(t, "q", 60, types...) // "rare": 3 records, 20 apart
	want := tb.ok(t, "dead", "ls", "--type", "rare", "--json")
	var all deadLsOut
	if err := json.Unmarshal([]byte(want), &all); err != nil || len(all.Records) != 3 {
		t.Fatalf("unbounded listing: %v, %s", err, want)
	}
	for _, maxScan := range []string{"1", "7", "20", "59"} {
		if got := tb.ok(t, "dead", "ls", "--type", "rare", "--json", "--max-scan", maxScan); got != want {
			t.Errorf("--max-scan %s:\n%s\nwant\n%s", maxScan, got, want)
		}
	}
	// A page that fills up stops, with a cursor, even on a partial pass.
	var two deadLsOut
	tb.okJSON(t, &two, "dead", "ls", "--type", "rare", "--limit", "2", "--max-scan", "7")
	if len(two.Records) != 2 || two.Next == "" {
		t.Fatalf("limit 2: %+v", two)
	}
	var rest deadLsOut
	tb.okJSON(t, &rest, "dead", "ls", "--type", "rare", "--limit", "2", "--max-scan", "7", "--cursor", two.Next)
	if len(rest.Records) != 1 || rest.Next != "" || rest.Records[0].ID != all.Records[2].ID {
		t.Fatalf("the page after: %+v", rest)
	}
}

func trusting(t *testing.T, certFile string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestDashboardTLS(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	certFile, keyFile := writeSelfSigned(t, t.TempDir())
	url, stop := tb.startDashboard(t, nil, "--addr", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("announced %q, want https", url)
	}
	res, err := trusting(t, certFile).Get(url + "dead")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.TLS == nil {
		t.Fatalf("GET over TLS: %d", res.StatusCode)
	}
	if got := res.Header.Get("Set-Cookie"); !strings.HasPrefix(got, "__Host-delayq_csrf=") || !strings.Contains(got, "Secure") {
		t.Fatalf("cookie over TLS: %q", got)
	}
	stop()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert and --tls-key together"},
		{[]string{"--tls-key", keyFile}, "--tls-cert and --tls-key together"},
		{[]string{"--tls-cert", keyFile, "--tls-key", keyFile}, "invalid --tls-cert/--tls-key"},
		{[]string{"--tls-cert", certFile + ".missing", "--tls-key", keyFile}, "invalid --tls-cert/--tls-key"},
	} {
		r := tb.run(t, append([]string{"dashboard", "--addr", "127.0.0.1:0"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dashboard %q: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

func hostGet(t *testing.T, url, host string, header ...string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second} // not http.DefaultTransport, which other tests' servers close idle connections of
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// The dashboard answers to loopback names and --allowed-host names only,
// and logs wrong credentials on stderr.
func TestDashboardHostsAndFailedLogins(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	url, stop, stderr := tb.startDashboardStderr(t, []string{"DELAYQ_DASHBOARD_TOKEN=s3cret-0123456789"},
		"--addr", "127.0.0.1:0", "--allowed-host", "ops.example.com", "--allowed-host", "admin.example.com:8443")
	auth := []string{"Authorization", "Bearer s3cret-0123456789"}
	for host, want := range map[string]int{
		"localhost":              http.StatusOK,
		"ops.example.com":        http.StatusOK,
		"admin.example.com:8443": http.StatusOK,
		"admin.example.com":      http.StatusMisdirectedRequest,
		"evil.example":           http.StatusMisdirectedRequest,
	} {
		if got := hostGet(t, url, host, auth...); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	for range 5 {
		if got := hostGet(t, url, "127.0.0.1", "Authorization", "Bearer wrong-guess"); got != http.StatusUnauthorized {
			t.Fatalf("wrong token: %d", got)
		}
	}
	stop()
	log := stderr.String()
	if strings.Count(log, "wrong credentials refused") != 1 || !strings.Contains(log, `"count":1`) || strings.Contains(log, "wrong-guess") {
		t.Fatalf("stderr after five wrong tokens:\n%s", log)
	}
	if !strings.Contains(log, "request for a host not allowed refused") {
		t.Fatalf("no line about the refused hosts:\n%s", log)
	}

	// Without --allowed-host a proxy's name is refused.
	url, _ = tb.startDashboard(t, nil, "--addr", "127.0.0.1:0")
	if got := hostGet(t, url, "ops.example.com"); got != http.StatusMisdirectedRequest {
		t.Fatalf("Host ops.example.com without --allowed-host: %d", got)
	}
	r := tb.run(t, "dashboard", "--addr", "127.0.0.1:0", "--allowed-host", "https://ops.example.com")
	if r.code != 2 || !strings.Contains(r.stderr, "AllowedHosts") {
		t.Fatalf("a bad --allowed-host: %+v", r)
	}
}

// Remote access needs a secret of 16 bytes; served over plain HTTP it
// warns that credentials cross the network in clear text, and it answers
// to its own address.
func TestDashboardRemote(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := runBinary(t, []string{"REDIS_URL=" + tb.url, "DELAYQ_DASHBOARD_TOKEN=short"}, "", "dashboard", "--namespace", tb.ns, "--addr", "0.0.0.0:0", "--allow-remote")
	if r.code != 2 || !strings.Contains(r.stderr, "credentials too short") || strings.Contains(r.stderr, "short\"") {
		t.Fatalf("remote with a 5-byte token: %+v", r)
	}
	var ip net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ip = n.IP
			break
		}
	}
	if ip == nil {
		t.Skip("no non-loopback IPv4 address to serve on")
	}
	url, stop, stderr := tb.startDashboardStderr(t, []string{"DELAYQ_DASHBOARD_TOKEN=remote-0123456789abcdef"}, "--addr", ip.String()+":0", "--allow-remote")
	if got := hostGet(t, url, strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"), "Authorization", "Bearer remote-0123456789abcdef"); got != http.StatusOK {
		t.Fatalf("GET %s: %d", url, got)
	}
	if got := hostGet(t, url, "evil.example", "Authorization", "Bearer remote-0123456789abcdef"); got != http.StatusMisdirectedRequest {
		t.Fatalf("GET %s for evil.example: %d", url, got)
	}
	stop()
	if !strings.Contains(stderr.String(), "warning: serving other machines over plain HTTP") {
		t.Fatalf("no warning about plain HTTP:\n%s", stderr.String())
	}
}
