//go:build unix

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// fdLimit is the process's soft limit on open file descriptors as it
// stands now (Go raises the soft limit to the hard one at start on Linux
// and the BSDs, and serve raises it further when it needs more and may:
// raiseFDLimit); 0 when unknown.
func fdLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}

// raiseFDLimit raises the process's open-file limit to need where it is
// below: the soft limit up to the hard limit, and the hard limit too when
// the process may (root or CAP_SYS_RESOURCE; on Linux at most
// fs.nr_open). It never lowers a limit. The result says what the limits
// were and became.
func raiseFDLimit(need uint64) fdRaise {
	r := fdRaise{Need: need}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		r.Err = err
		return r
	}
	r.SoftBefore, r.HardBefore = uint64(rl.Cur), uint64(rl.Max)
	r.SoftAfter, r.HardAfter = r.SoftBefore, r.HardBefore
	if r.SoftBefore >= need {
		return r
	}
	target := need
	if max := nrOpen(); max > 0 && target > max {
		target = max
	}
	if r.HardBefore < target {
		// Raising the hard limit needs privilege; without it, EPERM and
		// the soft limit goes as far as the hard one.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: target, Max: target}); err != nil {
			r.Err = err
			target = r.HardBefore
		}
	}
	if target > r.SoftBefore {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: target, Max: max(target, r.HardBefore)}); err != nil && r.Err == nil {
			r.Err = err
		}
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		r.SoftAfter, r.HardAfter = uint64(rl.Cur), uint64(rl.Max)
	}
	return r
}

// nrOpen is Linux's ceiling on the hard limit (fs.nr_open); 0 where
// unknown.
func nrOpen() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
