//go:build !unix

package main

// fdLimit is 0 (unknown) where there is no RLIMIT_NOFILE.
func fdLimit() uint64 { return 0 }
