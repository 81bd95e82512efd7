//go:build !unix

package main

import "errors"

// fdLimit is 0 (unknown) where there is no RLIMIT_NOFILE.
func fdLimit() uint64 { return 0 }

// raiseFDLimit cannot raise anything where there is no RLIMIT_NOFILE.
func raiseFDLimit(need uint64) fdRaise {
	return fdRaise{Need: need, Err: errors.New("no RLIMIT_NOFILE on this platform")}
}
