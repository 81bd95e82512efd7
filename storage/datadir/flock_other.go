//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package datadir

import (
	"errors"
	"os"
)

// tryLock is not implemented on this platform: Lock and Holder fail.
func tryLock(*os.File) (bool, error) {
	return false, errors.ErrUnsupported
}
