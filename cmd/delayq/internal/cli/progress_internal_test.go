package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// TestRedriveProgressOnlyOnATerminal runs the command in-process, telling it
// that stderr is a terminal or not.
func TestRedriveProgressOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	for _, tty := range []bool{true, false} {
		t.Run(fmt.Sprintf("tty=%v", tty), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb, ns := redistest.New(t)
			b, err := broker.New(rdb, broker.Options{Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			envs := make([]*job.Envelope, 250)
			for i := range envs {
				envs[i] = &job.Envelope{Queue: "q", Type: "t"}
			}
			if err := b.Enqueue(ctx, envs...); err != nil {
				t.Fatal(err)
			}
			res, err := testkit.Drive(b).Claim(ctx, "q", 250, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range res.Jobs {
				if _, err := testkit.Drive(b).Kill(ctx, c.Lease, &job.DeadRecord{Type: "t", Body: c.Body, Error: "x"}); err != nil {
					t.Fatal(err)
				}
			}
			var stdout, stderr bytes.Buffer
			a := &app{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: os.Getenv, stderrTTY: tty}
			code := a.run(ctx, []string{"dead", "redrive", "--all", "--yes", "--batch", "100",
				"--redis-url", TopologyURL(t, ""), "--namespace", ns})
			if code != ExitOK || !strings.Contains(stdout.String(), "redriven 250 dead job(s)") {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
			want := "\rredriven 100 of 250 (0 failed)\rredriven 200 of 250 (0 failed)\rredriven 250 of 250 (0 failed)\n"
			if !tty {
				want = ""
			}
			if stderr.String() != want {
				t.Fatalf("stderr %q, want %q", stderr.String(), want)
			}
		})
	}
}
