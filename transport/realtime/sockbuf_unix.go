//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package realtime

import (
	"io"
	"net"
	"os"
	"syscall"
)

// rawReader reads a connection's file descriptor directly: a read waits
// in the runtime's poller (no buffer) until the kernel has bytes, and
// takes a pooled buffer only then. It is used by one goroutine at a time.
type rawReader struct {
	rc syscall.RawConn
	// fill is r.readFD, made once (a method value per read would
	// allocate).
	fill func(fd uintptr) bool
	// the read in progress: into dst, or into a pooled buffer (dst nil)
	dst    []byte
	pooled *[netReadBuf]byte
	n      int
	err    error
}

// newRawReader returns a raw reader of conn, or nil when conn has no file
// descriptor to read.
func newRawReader(conn net.Conn) *rawReader {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawReader{rc: rc}
	r.fill = r.readFD
	return r
}

// read reads into p, or, with p nil, into a pooled buffer it returns
// (with the bytes read; nil when none were). It returns io.EOF at the
// end of the stream.
func (r *rawReader) read(p []byte) (int, *[netReadBuf]byte, error) {
	r.dst, r.n, r.err = p, 0, nil
	err := r.rc.Read(r.fill)
	n, buf := r.n, r.pooled
	r.dst, r.pooled = nil, nil
	if err == nil && r.err != nil {
		err = os.NewSyscallError("read", r.err)
	}
	if err == nil && n == 0 {
		err = io.EOF
	}
	if n == 0 && buf != nil {
		readBufs.Put(buf)
		buf = nil
	}
	return n, buf, err
}

// readFD is the raw read: false (wait for the poller) while the kernel
// has nothing.
func (r *rawReader) readFD(fd uintptr) bool {
	for {
		dst := r.dst
		if dst == nil {
			if r.pooled == nil {
				r.pooled = readBufs.Get().(*[netReadBuf]byte)
			}
			dst = r.pooled[:]
		}
		n, err := syscall.Read(int(fd), dst)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if r.pooled != nil { // not held while the socket is idle
				readBufs.Put(r.pooled)
				r.pooled = nil
			}
			return false
		case err != nil:
			n = 0
		}
		r.n, r.err = n, err
		return true
	}
}
