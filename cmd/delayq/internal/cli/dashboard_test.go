package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/job"
)

// startDashboard runs "delayq dashboard --json" with args and env, and
// returns the URL it announced and a stop function (SIGINT, then wait) that
// fails the test unless the command exits 0.
func (tb *testBundle) startDashboard(t *testing.T, env []string, args ...string) (string, func()) {
	t.Helper()
	url, stop, _ := tb.startDashboardStderr(t, env, args...)
	return url, stop
}

// startDashboardStderr is startDashboard that also returns the command's
// stderr, to read once stop returned.
func (tb *testBundle) startDashboardStderr(t *testing.T, env []string, args ...string) (string, func(), *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dashboard", "--json", "--namespace", tb.ns}, args...)...)
	cmd.Env = append(append(os.Environ(), "REDIS_URL="+tb.url), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("dashboard announced nothing: %v, stderr %q", lines.Err(), stderr.String())
	}
	var ready struct{ URL, Namespace string }
	if err := json.Unmarshal(lines.Bytes(), &ready); err != nil || !strings.HasPrefix(ready.URL, "http") || ready.Namespace != tb.ns {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("ready line %q (%v)", lines.Text(), err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, out)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("dashboard after SIGINT: %v, stderr %q", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("dashboard did not stop within 30s of SIGINT")
		}
	}
	t.Cleanup(stop)
	return ready.URL, stop, &stderr
}

func httpGet(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second} // not http.DefaultTransport, which other tests' servers close idle connections of
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.b.Enqueue(tb.ctx, &job.Envelope{ID: "a", Queue: "billing", Type: "invoice.send", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	url, stop := tb.startDashboard(t, nil, "--addr", "127.0.0.1:0", "--prefix", "/ops", "--read-only")
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/ops/") {
		t.Fatalf("announced %q, want the prefix", url)
	}
	code, body := httpGet(t, url)
	if code != http.StatusOK || !strings.Contains(body, `href="/ops/queues/billing"`) || !strings.Contains(body, "read-only") {
		t.Fatalf("GET %s: %d\n%s", url, code, body)
	}
	stop()

	// Credentials from the environment.
	url, _ = tb.startDashboard(t, []string{"DELAYQ_DASHBOARD_TOKEN=s3cret"}, "--addr", "127.0.0.1:0")
	if code, _ := httpGet(t, url); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code, body := httpGet(t, url, "Authorization", "Bearer s3cret"); code != http.StatusOK || !strings.Contains(body, "billing") {
		t.Fatalf("with the token: %d", code)
	}
}

func TestDashboardBadUsage(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "0.0.0.0:0"}, "not loopback"},
		{[]string{"--addr", ":0", "--allow-remote"}, "no token or basic auth"},
		{[]string{"--addr", "127.0.0.1:0", "--prefix", "ops"}, "Prefix"},
		{[]string{"--refresh", "-1s"}, "--refresh"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		r := tb.run(t, append([]string{"dashboard"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dashboard %q: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	r := runBinary(t, []string{"REDIS_URL=redis://127.0.0.1:1/0"}, "", "dashboard", "--addr", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot connect to Redis") {
		t.Fatalf("dashboard without Redis: %+v", r)
	}
}
