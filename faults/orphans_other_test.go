//go:build !linux

package faults

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal:
// a test that dies abruptly may leave its daemons running there.
func dieWithParent(*exec.Cmd) {}
