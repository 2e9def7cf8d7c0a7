//go:build unix

package agentprompt

import "syscall"

// oNonblock makes opening a FIFO return at once instead of blocking until a
// writer appears.
const oNonblock = syscall.O_NONBLOCK
