//go:build !unix

package embedded

import "os"

// tryLock does not lock where flock is missing: the file is still
// created (so an unwritable directory fails early), but a second server
// on the same store is not detected.
func tryLock(*os.File) (bool, error) { return true, nil }
