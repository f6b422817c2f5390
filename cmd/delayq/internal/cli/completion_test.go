package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The subcommands a shell offers after "delayq", "delayq jobs" and
// "delayq dead".
var (
	topCommands  = []string{"acl", "admin", "batches", "completion", "dashboard", "dead", "enqueue", "help", "jobs", "keys", "periodic", "queues", "stats", "version", "workers"}
	jobsCommands = []string{"cancel", "ls", "reschedule", "show"}
	deadCommands = []string{"ls", "purge", "redrive", "rm", "show", "trim"}
)

// TestCompletion: "delayq completion bash|zsh|fish" writes each shell's
// script. The scripts are cobra's: they hold no list of commands but ask
// the binary ("delayq __complete ...") each time, so the test checks that
// each script is produced, registers itself for delayq and asks that hook,
// and that the hook answers with the subcommands (and the values of
// --state and of the switch of keys fair); then bash, with the bash script loaded, completes them.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, marker := range map[string]string{
		"bash": "complete -o default -F __start_delayq delayq",
		"zsh":  "#compdef delayq",
		"fish": "complete -c delayq ",
	} {
		r := runBinary(t, nil, "", "completion", shell)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, marker) || !strings.Contains(r.stdout, " __complete ") {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes without %q or the __complete hook", shell, r.code, r.stderr, len(r.stdout), marker)
		}
	}
	if r := runBinary(t, nil, "", "completion", "tcsh"); r.code != 2 || !strings.Contains(r.stderr, `unknown command "tcsh"`) {
		t.Errorf("completion tcsh: %+v", r)
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{""}, topCommands},
		{[]string{"jobs", ""}, jobsCommands},
		{[]string{"dead", ""}, deadCommands},
		{[]string{"de"}, []string{"dead"}},
		{[]string{"jobs", "ls", "--state", ""}, []string{"all", "scheduled", "processing"}},
		{[]string{"keys", "fair", "imports", ""}, []string{"on", "off"}},
	} {
		r := runBinary(t, nil, "", append([]string{"__complete"}, c.args...)...)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if name, _, _ := strings.Cut(line, "\t"); !strings.HasPrefix(name, ":") {
				got = append(got, name)
			}
		}
		if r.code != 0 || !slices.Equal(got, c.want) {
			t.Errorf("__complete %q: exit %d, candidates %q, want %q", c.args, r.code, got, c.want)
		}
	}

	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err) // .ci/run itself runs in bash
	}
	script := filepath.Join(t.TempDir(), "delayq.bash")
	r := runBinary(t, nil, "", "completion", "bash")
	if err := os.WriteFile(script, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	// COMP_WORDS as bash sets them when Tab is pressed after the line;
	// _get_comp_words_by_ref stands in for the bash-completion package,
	// which the script uses when it is installed.
	complete := func(line string) []string {
		t.Helper()
		prog := `source "$1"
_get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
read -ra COMP_WORDS <<<"$2"
[[ $2 == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMP_LINE=$2; COMP_POINT=${#COMP_LINE}
__start_delayq 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"`
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bash, "--norc", "--noprofile", "-c", prog, "bash", script, line)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash completing %q: %v", line, err)
		}
		return strings.Fields(string(out))
	}
	for line, want := range map[string][]string{
		"delayq ":      topCommands,
		"delayq jobs ": jobsCommands,
		"delayq dead ": deadCommands,
		"delayq st":    {"stats"},
	} {
		if got := complete(line); !slices.Equal(got, want) {
			t.Errorf("bash completes %q to %q, want %q", line, got, want)
		}
	}
}
