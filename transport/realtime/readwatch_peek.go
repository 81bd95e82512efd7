//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package realtime

import (
	"errors"
	"net"
	"syscall"
)

// unread reports whether the kernel holds bytes (or the end of the
// stream) the socket's reader has not read yet: a non-blocking peek at
// the socket's receive buffer. A connection without a file descriptor
// reports false.
func unread(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var one [1]byte
	pending := false
	_ = rc.Control(func(fd uintptr) {
		for {
			_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			// Data (n > 0) or the end of the stream (n == 0 without an
			// error): the reader has something to read.
			pending = err == nil
			return
		}
	})
	return pending
}
