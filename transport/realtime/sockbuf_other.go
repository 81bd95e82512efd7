//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package realtime

import "net"

// rawReader is not available on this platform: sockets keep 4 KiB read
// and write buffers of their own.
type rawReader struct{}

func newRawReader(net.Conn) *rawReader { return nil }

func (*rawReader) read([]byte) (int, *[netReadBuf]byte, error) { panic("unreachable") }
