//go:build unix && !linux

package pgtest

import "syscall"

// sysProcAttr runs a server binary with cred (nil: as the caller).
// Parent-death signals are Linux only.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
