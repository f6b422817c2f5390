//go:build linux

package redistest

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel kill the child when the thread that started
// it exits, so a redis-server does not outlive a test binary that is killed.
// The Go runtime keeps its threads for the life of the process unless a
// goroutine exits while locked to one, which nothing here does.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
