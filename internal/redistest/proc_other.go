//go:build !linux

package redistest

import "os/exec"

// setPdeathsig does nothing: parent-death signals are Linux only.
func setPdeathsig(*exec.Cmd) {}
