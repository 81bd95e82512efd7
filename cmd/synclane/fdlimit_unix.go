//go:build unix

package main

import "syscall"

// fdLimit is the process's soft limit on open file descriptors as it
// stands now (Go raises the soft limit to the hard one at start on Linux
// and the BSDs, so this is the limit the process actually has); 0 when
// unknown.
func fdLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
