//go:build !unix

package agentprompt

// oNonblock is 0 where opening a FIFO cannot block.
const oNonblock = 0
