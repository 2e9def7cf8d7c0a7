//go:build !unix

package agentstore

import "os"

// inode is 0, 0 where the platform gives no inode number or change time:
// the stat check then rests on size and modification time.
func inode(os.FileInfo) (uint64, int64) { return 0, 0 }
