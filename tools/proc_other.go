//go:build !unix

package tools

import "os"

// oNonblock is 0 where FIFOs cannot block an open.
const oNonblock = 0

// exitSignal is "" where processes do not end by signals.
func exitSignal(*os.ProcessState) string { return "" }

// writersGone cannot tell where pipes have no POLLHUP: false.
func writersGone(*os.File) bool { return false }
