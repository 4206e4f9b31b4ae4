package faults

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process when this test
// process ends, whatever ends it (a timeout's panic runs no cleanup): a
// failed run leaves no daemons behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
