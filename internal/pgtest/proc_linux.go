//go:build linux

package pgtest

import "syscall"

// sysProcAttr runs a server binary with cred (nil: as the caller) and makes
// the kernel kill it when the thread that started it exits, so a postgres
// does not outlive a test binary that is killed. Go sets the parent-death
// signal after switching credentials, which would otherwise clear it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
